-- sequencer_balance.lua: moves hot shared-log sequencers to the least-loaded node, with
-- back-off (issue 27; seed 003 §Load Balancing ZLog Sequencers).
--
-- Load is sequencing work: load() is the request rate of the slots this node's sequencers
-- live in (`sequencers()[k].load`: their ZLOG.NEXT requests and the few other keyed requests
-- of the log name's slot), so every node publishes what it sequences and `servers[i].load`
-- compares nodes by it. (With `--tick manual` a node publishes its measured request rate
-- before the policy runs, so the other nodes' loads are their whole request rates there;
-- run this balancer with wall-clock ticks.)
--
-- The migration unit is a sequencer: the slot of its log's name. Moving the slot moves the
-- sequencer (the new owner answers -NOSEQ and the first client recovers the log at a newer
-- epoch, docs/shared-log.md); the log's entries stay where they are.
--
--   units = "one" (default)  the busiest sequencer s whose move to the least-loaded node c
--                            narrows the gap by a margin: s.load * (1 + margin) < me - c.
--                            The two loads end closer than they were, so a move never just
--                            swaps which node is hotter and two nodes never pass a
--                            sequencer back and forth.
--   units = "half"           half the gap to the least-loaded node, as whole sequencers (the
--                            host picks them by its 80-120% rule) among those that would each
--                            pass the "one" test: Malacology's migration unit as a share of
--                            the load, several sequencers in one decision.
--
-- Conservative under noise: sequencers below `min_rate` ZLOG.NEXT requests/s never move,
-- the imbalance must show on `hold` consecutive ticks before a move, and after a move the
-- node waits `wait` ticks so the move shows in every node's load before the next decision.
-- State (WRstate): {wait = ticks still to wait, seen = ticks the imbalance has held}.
--
-- Parameters (read at each tick):
--   units      "one" or "half" (default "one")
--   margin     share of a sequencer's load the gap must exceed it by (default 0.2)
--   min_rate   ZLOG.NEXT requests/s below which a sequencer stays put (default 20)
--   hold       consecutive ticks an imbalance must last (default 2)
--   wait       ticks to wait after a move (default 5)

local function param(name, default)
  local v = params[name]
  if v == nil then
    return default
  end
  return v
end

-- The least-loaded other node (lowest index on a tie) and its load.
local function coolest()
  local best, load = nil, math.huge
  for i = 0, nservers - 1 do
    local s = servers[i]
    if i ~= whoami and s ~= nil and s.load < load then
      best, load = i, s.load
    end
  end
  return best, load
end

function load()
  local total = 0
  for _, s in ipairs(sequencers()) do
    total = total + s.load
  end
  return total
end

-- What to send now: the target, the amount and the slots to choose from; nil for nothing.
local function plan()
  local target, there = coolest()
  if target == nil then
    return nil
  end
  local gap = servers[whoami].load - there
  local min_rate = param("min_rate", 20)
  local units = param("units", "one")
  if units == "one" then
    local margin = param("margin", 0.2)
    for _, s in ipairs(sequencers()) do -- busiest first
      if s.rate >= min_rate and s.load * (1 + margin) < gap then
        return target, s.load, { s.slot }
      end
    end
    return nil
  elseif units == "half" then
    local margin = param("margin", 0.2)
    local slots = {}
    for _, s in ipairs(sequencers()) do
      if s.rate >= min_rate and s.load * (1 + margin) < gap then
        slots[#slots + 1] = s.slot
      end
    end
    if #slots == 0 or gap / 2 < min_rate then
      return nil
    end
    return target, gap / 2, slots
  end
  error("sequencer_balance: units must be \"one\" or \"half\", got " .. tostring(units))
end

local decided -- this tick's plan, from when() to howmuch() and where()

function when()
  local state = RDstate() -- 0 until the first WRstate
  if type(state) ~= "table" then
    state = {}
  end
  local wait, seen = state.wait or 0, state.seen or 0
  decided = nil
  if wait > 0 then
    WRstate({ wait = wait - 1, seen = 0 })
    return false
  end
  local target, amount, slots = plan()
  if target == nil then
    WRstate({ wait = 0, seen = 0 })
    return false
  end
  seen = seen + 1
  if seen < param("hold", 2) then
    WRstate({ wait = 0, seen = seen })
    return false
  end
  decided = { target = target, amount = amount, slots = slots }
  WRstate({ wait = param("wait", 5), seen = 0 })
  return true
end

function howmuch()
  return decided.slots
end

function where()
  return { [decided.target] = decided.amount }
end
