-- Size-aware admission: objects larger than `max_size` bytes (--param max_size=N, default
-- 4096) bypass the cache on a miss or a write; the victims are the host's LRU order (no
-- `priority` hook). Same hits as the built-in LRU with every larger object left out.
function admit(obj)
  return obj.size <= (params.max_size or 4096)
end
