-- ARC (Megiddo and Modha, FAST '03) written with per-request hooks, in objects: T1 holds the
-- objects seen once recently, T2 those seen at least twice; B1 and B2 remember (as ghosts)
-- what each evicted, and the target size p of T1 moves towards the list whose ghosts are hit.
--
-- The host keeps T1 and T2 as queues 1 and 2 ordered by last access (`priority`), so their
-- least recently used objects are the candidates `evict` chooses between; obj[1] holds an
-- object's list. Needs a capacity in objects (`--cache-size N`, `--max-keys N`).

local function new_list()
  local head = {}
  local l = { head = head, nxt = { [head] = head }, prv = { [head] = head }, n = 0 }
  return l
end
local function push_mru(l, id)
  local head = l.head
  local first = l.nxt[head]
  l.nxt[head], l.prv[id], l.nxt[id], l.prv[first] = id, head, first, id
  l.n = l.n + 1
end
local function remove(l, id)
  local p, n = l.prv[id], l.nxt[id]
  l.nxt[p], l.prv[n] = n, p
  l.prv[id], l.nxt[id] = nil, nil
  l.n = l.n - 1
end
local function contains(l, id) return l.prv[id] ~= nil end
local function drop_lru(l)
  local id = l.prv[l.head]
  if id ~= l.head then remove(l, id) end
end

local b1, b2 = new_list(), new_list()
local t1, t2 = 0, 0         -- objects in T1 and T2 (the host holds them)
local p = 0                 -- target size of T1
local incoming = "new"      -- where the object being inserted was found: "b1", "b2", "new"
local ghostless = false     -- case IV(a) with T1 full: the victim leaves no ghost

function admit(obj)
  local c = capacity_objects
  if c == nil then error("arc.lua needs a capacity in objects") end
  local id = obj.id
  ghostless = false
  if contains(b1, obj.id) then
    p = math.min(c, p + math.max(b2.n // b1.n, 1))
    remove(b1, id)
    incoming = "b1"
  elseif contains(b2, id) then
    p = math.max(0, p - math.max(b1.n // b2.n, 1))
    remove(b2, id)
    incoming = "b2"
  else
    incoming = "new"
    if t1 + b1.n == c then
      if t1 < c then drop_lru(b1) else ghostless = true end
    elseif t1 + t2 + b1.n + b2.n == 2 * c then
      drop_lru(b2)
    end
  end
  return true
end

function on_insert(obj)
  if incoming == "new" then
    obj[1] = 1
    t1 = t1 + 1
  else
    obj[1] = 2
    t2 = t2 + 1
  end
end

function on_hit(obj)
  if obj[1] == 1 then
    obj[1] = 2
    t1, t2 = t1 - 1, t2 + 1
  end
end

function priority(obj)
  return obj.last_access, obj[1]
end

-- ARC's REPLACE: T1's LRU object when T1 is over its target, T2's otherwise.
function evict(a, b)
  local from_t1 = t1 >= 1 and (t1 > p or (incoming == "b2" and t1 == p))
  if (a[1] == 1) == from_t1 then return a end
  return b
end

function on_evict(obj)
  if obj[1] == 1 then
    t1 = t1 - 1
    if not ghostless then push_mru(b1, obj.id) end
  else
    t2 = t2 - 1
    push_mru(b2, obj.id)
  end
end
