-- backoff.lua: a conservative balancer with back-off, as Malacology describes it.
--
-- Seed 003 §Feature: Backoff: a server above the mean load sends half the difference to the
-- least loaded server, but (1) only when that receiver's load is below a threshold, and (2)
-- not again until some ticks after its last export, so the effect of one migration shows
-- in the metrics before the next decision. The countdown is kept with WRstate, so it
-- survives a policy reload. Malacology found this conservative behaviour costs throughput
-- while a burst builds up (it reacts later than greedy spill), in exchange for fewer
-- migrations.
--
-- Parameters:
--   wait       ticks to wait after an export (default 5)
--   receiver   highest load a receiver may have (default: the mean load)
--   margin     share above the mean a server may carry before it exports (default 0.1)

-- Parameters are read at each tick (`params` is the tick's), not once at load.

local function mean_load()
  local total, n = 0, 0
  for _, s in pairs(servers) do
    total = total + s.load
    n = n + 1
  end
  return total / n
end

local function coolest()
  local best, load = nil, math.huge
  for i, s in pairs(servers) do
    if i ~= whoami and s.load < load then
      best, load = i, s.load
    end
  end
  return best, load
end

function when()
  local left = RDstate() or 0
  if left > 0 then
    WRstate(left - 1)
    return false
  end
  local mean = mean_load()
  local _, load = coolest()
  local limit = params.receiver or mean
  return servers[whoami].load > mean * (1 + (params.margin or 0.1)) and load < limit
end

function where()
  local target, load = coolest()
  WRstate(params.wait or 5)
  return { [target] = (servers[whoami].load - load) / 2 }
end
