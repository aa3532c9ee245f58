-- hotkey.lua: a balancer for a few very hot keys (ParSplice's skew), in the callback dialect.
--
-- Seeds 000 and 002: in ParSplice a handful of keys (the coordinates of the segments being
-- generated) take most of the requests, and which keys are hot moves as the simulation
-- goes on. Splitting the load evenly does not help there: the unit that matters is the
-- hot key's slot, which must move whole. So when a server carries much more than the mean,
-- it asks to send nearly the whole gap to the least loaded server: the host's chunk rule
-- (hottest slots first, 80-120% of the amount) then moves the hot slot alone when it fits
-- in the gap, isolating it on the coolest server, and fills with smaller slots otherwise.
-- A back-off keeps the hot slot from bouncing between two servers while the new load shows
-- up in the metrics. A key hotter than the gap cannot be helped by moving slots, and is
-- left where it is.
--
-- Parameters:
--   ratio    load over the mean that counts as a hot spot (default 1.5)
--   share    share of the gap to the coolest server to send (default 0.9)
--   backoff  ticks to wait after an export (default 3)

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
  return coolest() ~= nil and servers[whoami].load > (params.ratio or 1.5) * mean_load()
end

function where()
  local target, load = coolest()
  WRstate(params.backoff or 3)
  return { [target] = (servers[whoami].load - load) * (params.share or 0.9) }
end
