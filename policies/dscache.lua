-- dscache.lua: dynamically sized cache by access-fan detection. Needs no parameters.
--
-- Seed 000 §V-B and Fig. 9. ParSplice tasks revisit the states of a superbasin many times,
-- then move on and rarely come back: in a plot of key id against time the accesses form
-- "fans". Walking the time series backwards, a new fan starts whenever the key id drops
-- below the lowest id seen so far (Fig. 9, line 7); each fan's height (top - bottom, Fig. 9
-- line 13) is the range of keys that superbasin kept reading, i.e. how many keys a cache
-- needs to serve it without misses.
--
-- Sizing the cache to the newest fan alone thrashes: trajectories do return to keys of an
-- older basin, and the next basin's size is unknown. So howmuch() sets the capacity to the
-- tallest fan still in the retained series (its length, the host's --timeseries bound, is
-- the policy's memory), times a margin for keys created while a fan is open, plus a little
-- slack for the first, tiny fans of a run. The slack is kept small because it is absolute:
-- on a slow-growing run with a few hundred keys a slack of 64 objects alone would cost
-- more memory than the policy saves. The cache shrinks again when tall fans age out of the
-- series and grows as soon as a taller one appears. when() acts only when that target
-- differs from the capacity in force.
--
-- The fan scan is the engine's native implementation of Fig. 9, kept incrementally between
-- ticks: timeseries():fansummary() gives the number of fans and the tallest height without
-- building a table per fan, so a tick costs what the new events cost. scan=fans reads the
-- same fans as tables (timeseries():fans()); scan_fans() below is the same scan written with
-- the plain accessors (scan=lua). All three decide alike.
--
-- Parameters (all optional):
--   margin  capacity = tallest fan height * margin + slack (default 1.5)
--   slack   objects added to the target (default 2)
--   scan    "native" (default), "fans" or "lua"

-- Fig. 9 with the plain accessors: fans newest first, each {first, last, start, finish,
-- top, bottom}.
local function scan_fans(d)
  local fans = {}
  local n = d:size()
  if n == 0 then return fans end
  local get = d.get
  local finish, bottom = get(d, n)
  local last, top = n, 0
  for i = n, 1, -1 do
    local ts, id = get(d, i)
    if id < bottom then
      fans[#fans + 1] = {first = i + 1, last = last, start = (get(d, i + 1)),
                         finish = finish, top = top, bottom = bottom}
      last, finish, top, bottom = i, ts, 0, id
    end
    if id > top then top = id end
  end
  fans[#fans + 1] = {first = 1, last = last, start = (get(d, 1)),
                     finish = finish, top = top, bottom = bottom}
  return fans
end

local target = nil

function when()
  local d = timeseries()
  local count, tallest
  if params.scan == "lua" or params.scan == "fans" then
    local fans
    if params.scan == "lua" then fans = scan_fans(d) else fans = d:fans() end
    count, tallest = #fans, 0
    for _, fan in ipairs(fans) do
      if fan.top - fan.bottom > tallest then tallest = fan.top - fan.bottom end
    end
  else
    count, tallest = d:fansummary()
  end
  if count < 2 then return false end -- no fan boundary yet (Fig. 9, line 18)
  target = math.ceil(tallest * (params.margin or 1.5)) + (params.slack or 2)
  WRstate(target)
  return servers[whoami].capacity ~= target
end

function howmuch()
  return {capacity = target}
end
