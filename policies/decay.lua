-- decay.lua: per-key decay statistic.
--
-- Seed 000 §V-A ("Statistics", one of the strategies tried before access-fan detection):
-- every access sets a key's counter to `history` seconds; the counter decays with time and
-- keys whose counter reaches 0 are evicted. Keys still "alive" are exactly those accessed in
-- the last `history` seconds, and under LRU the dead ones are the least recently used, so
-- howmuch() evicts cachesize - alive objects from the LRU end.
--
-- The alive set is what timeseries():distinct(horizon) counts natively, kept incrementally
-- between ticks; with scan=lua it is found by walking the time series backwards with the
-- plain accessors (timeseries():get(i)) until events are older than `history` seconds. Both
-- count the same keys.
--
-- Parameters:
--   history  seconds a key stays alive after an access (default 10; the paper's tuned value)
--   scan     "native" (default) or "lua"

local alive = 0

local function count_alive()
  local d = timeseries()
  local horizon = now - (params.history or 10)
  if params.scan ~= "lua" then return d:distinct(horizon) end
  local seen, count = {}, 0
  for i = d:size(), 1, -1 do
    local ts, id = d:get(i)
    if ts < horizon then break end
    if not seen[id] then
      seen[id] = true
      count = count + 1
    end
  end
  return count
end

function when()
  alive = count_alive()
  return servers[whoami].cachesize > alive
end

function howmuch()
  return servers[whoami].cachesize - alive
end
