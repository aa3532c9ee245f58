-- dscache2.lua: dynamically sized cache that follows the open access fans down as well as up.
-- Needs no parameters.
--
-- Second generation of dscache.lua (seed 000 §V-B, Fig. 9), which sizes the cache to the
-- tallest fan still in the time series and so ratchets up and rarely comes down. Here a fan
-- counts only while it is open, and the evidence that it is open is a reuse: a read at time
-- `at` of a key last accessed at `from` shows that the superbasin read at `from` is still
-- being read. The engine's timeseries():openfans(hold) keeps every such read for
-- `hold * (at - from)` seconds and reports `since`, the earliest `from` still held: the
-- start of the oldest open fan. Fans nobody has reached back into for that long are closed
-- and forgotten, so the cache shrinks when a superbasin is left and grows while one lasts.
--
-- Capacity = distinct keys accessed within the horizon (timeseries():distinct(t), the LRU
-- size that keeps every key read since t) + an allowance for new keys:
--   horizon   = max(now - since, record * rec, one tick): `record` is the longest reuse
--               age seen so far (the furthest any return to an older basin reached), so a
--               return as far back as one already seen finds its key still cached;
--   allowance = the most keys ever created within one tick: keys created before the next
--               decision push older ones out of an LRU cache sized to the past.
-- Everything is measured from the run itself; `mantle analyze` reports the same measures
-- (reuse ages, returns, new keys per second). when() acts only when the target changes.
--
-- Parameters (all optional; the evaluation in docs/reproduce-parsplice.md sets none):
--   hold  share of a reuse's age for which it keeps its fan open (default 0.25)
--   rec   weight of the longest reuse age in the horizon; 0 ignores it (default 1)

local newmax = 0     -- most keys created within one tick so far
local last_now = nil
local target = nil

function when()
  local d = timeseries()
  if d:size() == 0 then return false end
  local open = d:openfans(params.hold or 0.25)
  if open.new_keys > newmax then newmax = open.new_keys end
  local step = last_now and now - last_now or 0
  last_now = now
  local horizon = math.max(open.record * (params.rec or 1), step)
  if open.since ~= nil and now - open.since > horizon then horizon = now - open.since end
  target = d:distinct(now - horizon) + newmax
  if target < 1 then target = 1 end
  WRstate(target)
  return servers[whoami].capacity ~= target
end

function howmuch()
  return {capacity = target}
end
