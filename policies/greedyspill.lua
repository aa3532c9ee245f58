-- greedyspill.lua: greedy spill load balancer, in the Ceph Mantle dialect.
--
-- Seed 000 Fig. 6 and §VI (the CephFS balancers of the Mantle paper), seed 003 §Mantle:
-- a server that has load while its right-hand neighbour has none sends it half of its load.
-- Written as a Ceph balancer chunk: it defines no when/howmuch/where globals and returns
-- the targets table itself ({[server] = load to send}, 0-based, one entry per server).
-- It reads the Ceph metric names (`all.meta_load`) that Mantle fills for a cache.
--
-- Parameters:
--   idle  load below which a server counts as idle (default 0.01)

local idle = params.idle or 0.01

local targets = {}
for rank, _ in pairs(mds) do
  targets[rank] = 0
end

local mine = mds[whoami]["all.meta_load"]
local neighbour = mds[whoami + 1]
if neighbour ~= nil and mine > idle and neighbour["all.meta_load"] < idle then
  targets[whoami + 1] = mine / 2
  BAL_LOG(5, "greedyspill: sending " .. (mine / 2) .. " to server " .. (whoami + 1))
end

return targets
