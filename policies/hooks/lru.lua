-- LRU written with per-request hooks: the host evicts the object with the lowest priority
-- first, and an object's priority is its last access (asked again after every hit), so the
-- victim is always the least recently used one. Same hits as the built-in `--eviction lru`.
function priority(obj)
  return obj.last_access
end
