-- switch.lua: activate the candidate whose shadow did best over the last window, with guard
-- rails. A switch policy (see docs/adaptive.md): switch(candidates, current) is called every
-- tick with the window figures of every candidate's shadow (in preference order) and of the
-- real cache (`current`, named after the active candidate); it returns the name to activate,
-- or nil to keep the active one.
--
-- Score of a candidate: its shadow's miss ratio plus `cost` times its mean size relative to
-- the largest candidate's mean size, so memory is traded against misses on the memory-miss
-- plane (cost=0: fewest misses whatever the memory).
-- Guard rails:
--   dwell       ticks a version stays active before another switch (default 5)
--   margin      hysteresis: a challenger must score this share lower than the active
--               (default 0.1: 10% lower)
--   tie         scores within this share of each other tie; the earlier candidate wins
--               (default 0.02)
--   warm        ticks of figures a shadow needs before it may be chosen (default 3)
-- The log line of a switch names its cause: "thrashing" when the real cache evicted at
-- least half as many objects as it missed in the window, "no progress" when its miss ratio
-- did not improve on the window before while the challenger misses less (seed 000 §VIII's
-- two examples), otherwise "better" (fewer misses, or less memory for as few).

local dwell = params.dwell or 5
local margin = params.margin or 0.1
local tie = params.tie or 0.02
local warm = params.warm or 3
local cost = params.cost or 0.1

local function score(c, largest)
  local size = 0
  if largest > 0 then size = c.mean_objects / largest end
  return c.miss_ratio + cost * size
end

local function fmt(x) return string.format("%.4f", x) end

function switch(candidates, current)
  local since = RDstate()
  if type(since) ~= "number" then since = 0 end
  if tick - since < dwell then return nil end

  local largest = 0
  for _, c in ipairs(candidates) do
    if c.mean_objects > largest then largest = c.mean_objects end
  end
  local mine, best, best_score = nil, nil, math.huge
  for _, c in ipairs(candidates) do
    if c.active then mine = c end
    if c.ticks >= warm and c.lookups > 0 then
      local s = score(c, largest)
      -- Preference order on ties: a later candidate must win by more than `tie`.
      if s < best_score * (1 - tie) then best, best_score = c, s end
    end
  end
  if best == nil or mine == nil or best.name == mine.name then return nil end
  local mine_score = score(mine, largest)
  if best_score >= mine_score * (1 - margin) then return nil end

  local why
  if current.misses > 0 and current.evictions >= 0.5 * current.misses then
    why = "thrashing: " .. current.name .. " evicted " .. fmt(current.evictions) ..
      " and missed " .. fmt(current.misses) .. " objects in the window"
  elseif current.miss_ratio > best.miss_ratio * (1 + tie)
      and current.miss_ratio >= current.prev_miss_ratio * (1 - tie) then
    why = "no progress: " .. current.name .. "'s miss ratio stayed at " ..
      fmt(current.miss_ratio) .. " (window before: " .. fmt(current.prev_miss_ratio) .. ")"
  elseif best.miss_ratio < mine.miss_ratio * (1 - tie) then
    why = "better: fewer misses"
  else
    why = "better: less memory for as few misses"
  end
  log(2, "switch to " .. best.name .. " (score " .. fmt(best_score) .. " vs " ..
    fmt(mine_score) .. "): " .. why)
  WRstate(tick)
  return best.name
end
