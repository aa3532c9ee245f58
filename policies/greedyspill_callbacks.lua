-- greedyspill_callbacks.lua: the Mantle paper's greedy spill, in the callback dialect.
--
-- Seed 000 §VI and seed 003 §Mantle (the "Greedy Spill Even" listing): a server that has
-- load while its right-hand neighbour (the next server by rank) has almost none sends the
-- neighbour half of its load. The same rule as Ceph's chunk in greedyspill.lua, written as
-- when()/where() so it can be read, tested and extended like the other balancers. Load moves
-- only rightwards, so a cluster of N servers fills one neighbour at a time: quick to react
-- to a burst, but it never evens out load that is already spread (see adaptable.lua).
--
-- Parameters:
--   idle  load below which a server counts as idle (default 0.01)

-- Parameters are read at each tick (`params` is the tick's), not once at load.
function when()
  local idle = params.idle or 0.01
  local neighbour = servers[whoami + 1]
  return neighbour ~= nil and servers[whoami].load > idle and neighbour.load < idle
end

function where()
  return { [whoami + 1] = servers[whoami].load / 2 }
end
