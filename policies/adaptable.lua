-- adaptable.lua: the Mantle paper's adaptable balancer, in the callback dialect.
--
-- Seed 000 §VI and seed 003 §Mantle: a server above the cluster's mean load sends its excess
-- to the servers below the mean, each getting what it lacks, so the cluster moves toward even
-- load from wherever it starts. A margin keeps small fluctuations from moving anything, and
-- a back-off (seed 003 §Feature: Backoff) waits some ticks after each export so the moved
-- load shows up in the metrics before the next decision; the countdown is kept with WRstate.
--
-- Parameters:
--   margin   share above the mean a server may carry before it exports (default 0.1)
--   backoff  ticks to wait after an export (default 2)

-- Read at each tick: `params` is empty while the file loads and holds the tick's values after.
local function margin()
  return params.margin or 0.1
end
local function backoff()
  return params.backoff or 2
end

local function mean_load()
  local total, n = 0, 0
  for _, s in pairs(servers) do
    total = total + s.load
    n = n + 1
  end
  return total / n
end

function when()
  local wait = RDstate() or 0
  if wait > 0 then
    WRstate(wait - 1)
    return false
  end
  return servers[whoami].load > mean_load() * (1 + margin())
end

function where()
  local mean = mean_load()
  local excess = servers[whoami].load - mean
  local targets = {}
  for i, s in pairs(servers) do
    if i ~= whoami and s.load < mean and excess > 0 then
      local amount = math.min(mean - s.load, excess)
      targets[i] = amount
      excess = excess - amount
    end
  end
  if next(targets) ~= nil then
    WRstate(backoff())
    BAL_LOG(5, "adaptable: over the mean by " .. (servers[whoami].load - mean))
  end
  return targets
end
