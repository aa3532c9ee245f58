-- fillspill.lua: the Mantle paper's fill-and-spill balancer, in the callback dialect.
--
-- Seed 000 §VI (the CephFS balancers of the Mantle paper): a server keeps its load as long
-- as it stays under a threshold ("fill"); what goes over is sent to the next servers by
-- rank, each filled up to the threshold in turn ("spill"). Unlike greedy spill it leaves a
-- busy but not overloaded server alone, so it moves nothing until a server is really full,
-- and it uses as few servers as it can. The threshold is in the unit of `load` (requests
-- per second by default).
--
-- Parameters:
--   threshold  load a server may carry before it spills (default 1000)
--   backoff    ticks to wait after a spill, for the moved load to show (default 1)

-- Parameters are read at each tick (`params` is the tick's), not once at load.
function when()
  local threshold = params.threshold or 1000
  local wait = RDstate() or 0
  if wait > 0 then
    WRstate(wait - 1)
    return false
  end
  return servers[whoami].load > threshold
end

function where()
  local threshold = params.threshold or 1000
  local excess = servers[whoami].load - threshold
  local targets = {}
  local rank = whoami + 1
  while excess > 0 and servers[rank] ~= nil do
    local room = threshold - servers[rank].load
    if room > 0 then
      local amount = math.min(room, excess)
      targets[rank] = amount
      excess = excess - amount
    end
    rank = rank + 1
  end
  if next(targets) ~= nil then
    WRstate(params.backoff or 1)
  end
  return targets
end
