-- switch.lua: activate the candidate whose shadow did best over the last window, when the
-- evidence says the switch pays for itself. A switch policy (see docs/adaptive.md):
-- switch(candidates, current) is called every tick with the window figures of every
-- candidate's shadow (in preference order) and of the real cache (`current`, named after the
-- active candidate); it returns the name to activate, or nil to keep the active one.
--
-- Scores are in misses over the window: a candidate's shadow's misses plus `cost` x its
-- lookups x its size / `ref` objects, so memory is traded against misses on the memory-miss
-- plane (cost=0: fewest misses, then the least memory). The size is what the shadow holds
-- now (its newest tick's mean, `last_objects`), which is what a switch hands the real cache:
-- misses need a window to be told from noise, a size does not, and a window's mean would
-- charge a cache that just shrank for a whole window of what it no longer holds. `ref` is a
-- fixed unit, not a window's figure, so window scores add up to about the whole run's
-- objective (misses + cost x lookups x mean size / ref) that docs/adaptive.md evaluates;
-- without it, the largest mean size any candidate has shown so far (a running maximum,
-- which only grows). Scores within `tie` of the lowest tie; a tie goes to the candidate
-- holding the least memory, then to the earlier one.
--
-- A shadow is always warm; the real cache is not after a switch to a candidate that keeps
-- more than it holds, and it pays cold misses for every such switch. So the active
-- candidate is left only when a challenger
--   * beats it in this window by more than margin x its score (hysteresis) plus
--     confidence x sqrt(both misses) (a window's noise: misses are counts), and
--   * has saved, since it drew ahead, at least the switch's warm-up charge: its lead per tick
--     beyond the hysteresis is summed while positive (a CUSUM, so a quiet tick does not
--     wipe out a long lead), on the bet that a lead lasts about as long again as it has.
-- The warm-up charge is learned: a window after each switch to a larger cache, the real
-- cache's misses beyond the new candidate's shadow's are that switch's warm-up, per object
-- the real cache lacked when it switched; the next switch to that candidate (before its
-- first, to any) is charged that rate times the objects the real cache lacks now. The first
-- switch to a larger cache is free (it is how the rate is learned). A switch to a smaller
-- one is charged `back` x the way back, should the regime return and the active candidate
-- be needed again, unless the challenger's shadow has missed no more than the active one's
-- over the whole run so far (nothing says the real cache would have to come back then).
-- A candidate that only ties with the active one never takes over (unless `settle` says
-- so): one that holds less but ties in a quiet window may miss when the traffic turns, and
-- growing back costs a warm-up.
--
-- Guard rails (params):
--   dwell       ticks a version stays active before another switch (default 5); after a
--               switch to a larger cache, a full window (its warm-up is measured then, and
--               leaving earlier would waste it)
--   margin      hysteresis share (default 0.1)
--   confidence  multiple of the noise a lead must exceed (default 1; 0 = off)
--   tie         scores within this share of the lowest tie (default 0.02)
--   warm        ticks of figures a shadow needs before it may be chosen (default 3)
--   cost        weight of memory against misses (default 0.1)
--   ref         objects that cost `cost` misses per lookup (default: the running maximum
--               of the candidates' mean sizes)
--   back        share of the way back a switch to a smaller cache is charged: `back` x the
--               learned warm-up rate of the active candidate x the objects it drops
--               (default 1; 0: a switch down is free, the earlier default)
--   size        "last" (default): memory is weighed at the newest tick's size; "mean": at
--               the window's mean (the earlier default)
--   settle      ticks a challenger must tie the active one on misses (within `tie`) while
--               holding less before the real cache moves to it (default 0: never; the
--               smallest such challenger wins; docs/adaptive.md measures 30, 100 and 300)
-- The log line of a switch names its cause: "thrashing" when the real cache evicted at
-- least half as many objects as it missed in the window, "no progress" when its miss ratio
-- did not improve on the window before while the challenger misses less (seed 000 §VIII's
-- two examples), otherwise "better" (fewer misses, or less memory for as few); and the
-- scores and the warm-up charge it weighed.

local dwell = params.dwell or 5
local margin = params.margin or 0.1
local confidence = params.confidence or 1
local tie = params.tie or 0.02
local warm = params.warm or 3
local cost = params.cost or 0.1
local ref = params.ref -- nil: the running maximum below
local back = params.back or 1
local now_size = (params.size or "last") == "last"
local settle = params.settle or 0

-- Learned between calls (lost on a reload of the switch policy, which is harmless: the next
-- switch to a larger cache learns it again).
local window = 1           -- the window's length in ticks (the largest `ticks` seen)
local rates = {}           -- name -> warm-up misses per lacking object, last measured
local last_rate = nil      -- the last rate measured for any candidate
local pending = nil        -- {name, tick, lacking}: a switch to a larger cache to measure
local gained = {}          -- name -> misses it would have saved since it drew ahead (CUSUM)
local largest = 0          -- the running maximum of the candidates' mean sizes
local seen = {}            -- name -> about the misses its shadow has had so far
local streak = {}          -- name -> ticks in a row it tied the active's misses, holding less

local function fmt(x) return string.format("%.4f", x) end

local function held(c)
  if now_size then return c.last_objects end
  return c.mean_objects
end

local function score(c)
  local unit = ref or largest
  local size = 0
  if unit > 0 then size = held(c) / unit end
  return c.misses + cost * c.lookups * size
end

-- Objects the real cache would lack if `c` took over now.
local function lacking(c, current)
  return math.max(0, c.mean_objects - current.mean_objects)
end

-- The warm-up a switch to `c` is charged. Up: what growing to `c` costs now. Down: `back`
-- times what coming back to the active candidate `mine` would cost for the objects the real
-- cache drops (a switch down is half of a round trip), unless `c` has missed no more than
-- `mine` so far: a candidate that held less and did as well gives no reason to expect the
-- way back (on hot-large, fixed 4000 after dscache).
local function charge(c, current, mine)
  local up = lacking(c, current)
  if up > 0 then return (rates[c.name] or last_rate or 0) * up end
  if (seen[c.name] or 0) <= (seen[mine.name] or 0) then return 0 end
  local dropped = math.max(0, current.mean_objects - c.mean_objects)
  return back * (rates[mine.name] or last_rate or 0) * dropped
end

local function measure(candidates, current)
  if pending == nil or tick - pending.tick < window then return end
  for _, c in ipairs(candidates) do
    if c.name == pending.name and c.active then
      local extra = math.max(0, current.misses - c.misses)
      local rate = extra / math.max(1, pending.lacking)
      rates[c.name], last_rate = rate, rate
    end
  end
  pending = nil
end

-- Logs the switch with its cause and remembers it.
local function handover(best, best_score, mine_score, price, current, mine, why)
  if why then
    -- the caller's reason
  elseif current.misses > 0 and current.evictions >= 0.5 * current.misses then
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
    fmt(mine_score) .. ", warm-up charge " .. fmt(price) .. "): " .. why)
  WRstate(tick)
  gained, streak = {}, {}
  local gap = lacking(best, current)
  if gap > 0 then pending = {name = best.name, tick = tick, lacking = gap} end
  return best.name
end

-- Counts, for every challenger, the consecutive ticks it has missed no more than the active
-- candidate while holding less.
local function count_ties(candidates, mine)
  for _, c in ipairs(candidates) do
    if c.name ~= mine.name and c.ticks >= warm and c.lookups > 0
        and c.misses <= mine.misses * (1 + tie) and held(c) < held(mine) * (1 - tie) then
      streak[c.name] = (streak[c.name] or 0) + 1
    else
      streak[c.name] = 0
    end
  end
end

-- A tie that has lasted `settle` ticks moves the real cache to the smallest such challenger.
local function settled(candidates, mine, mine_score, current)
  if settle <= 0 then return nil end
  local best
  for _, c in ipairs(candidates) do
    if (streak[c.name] or 0) >= settle and (best == nil or held(c) < held(best)) then best = c end
  end
  if best == nil then return nil end
  return handover(best, score(best), mine_score, 0, current, mine,
    "better: less memory for as few misses for " .. streak[best.name] .. " ticks")
end

function switch(candidates, current)
  local mine
  for _, c in ipairs(candidates) do
    if c.ticks > window then window = c.ticks end
    if c.mean_objects > largest then largest = c.mean_objects end
    if c.active then mine = c end
    -- A window's misses over its length, summed tick by tick: each miss counts about once.
    seen[c.name] = (seen[c.name] or 0) + c.misses / math.max(1, c.ticks)
  end
  measure(candidates, current)
  if mine ~= nil then count_ties(candidates, mine) end
  local since = RDstate()
  if type(since) ~= "number" then since = 0 end
  if tick - since < dwell then return nil end
  if pending ~= nil then return nil end -- a warm-up still to measure: stay a full window

  local low = math.huge
  for _, c in ipairs(candidates) do
    if c.ticks >= warm and c.lookups > 0 then
      local s = score(c)
      if s < low then low = s end
    end
  end
  if mine == nil or low == math.huge then return nil end
  -- What each challenger would have saved per tick, beyond the hysteresis, accumulated
  -- while positive (a CUSUM: a quiet tick does not wipe out a long lead).
  local mine_score = score(mine)
  for _, c in ipairs(candidates) do
    if c.name ~= mine.name and c.ticks >= warm and c.lookups > 0 then
      local step = (mine_score - score(c) - margin * mine_score) / window
      gained[c.name] = math.max(0, (gained[c.name] or 0) + step)
    end
  end
  -- Among the candidates that tie with the lowest score: the least memory, then the earliest.
  local best, best_score
  for _, c in ipairs(candidates) do
    if c.ticks >= warm and c.lookups > 0 then
      local s = score(c)
      if s <= low * (1 + tie)
          and (best == nil or held(c) < held(best) * (1 - tie)) then
        best, best_score = c, s
      end
    end
  end
  if best.name == mine.name or mine_score <= low * (1 + tie) then
    return settled(candidates, mine, mine_score, current)
  end
  local noise = confidence * math.sqrt(mine.misses + best.misses)
  if mine_score - best_score - margin * mine_score <= noise then return nil end
  -- A lead that has saved k misses so far is expected to save about as many more: the
  -- switch goes ahead once that pays for its warm-up.
  local price = charge(best, current, mine)
  if gained[best.name] < price then return nil end
  return handover(best, best_score, mine_score, price, current, mine)
end
