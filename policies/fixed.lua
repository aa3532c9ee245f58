-- fixed.lua: fixed-size LRU cache.
--
-- Seed 000 §IV ("Fixed Sized Cache", Fig. 7): keep at most n objects. When the cache holds
-- more than n objects, evict the excess from the least recently used end.
--   when():    servers[whoami].cachesize > n
--   howmuch(): servers[whoami].cachesize - n   (a number: evict that many now)
--
-- Parameters:
--   n  objects to keep (default 100000)

local function limit()
  return params.n or 100000
end

function when()
  return servers[whoami].cachesize > limit()
end

function howmuch()
  return servers[whoami].cachesize - limit()
end
