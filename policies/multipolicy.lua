-- multipolicy.lua: absorb the initial burst, then constrain the cache.
--
-- Seed 000 §IV and Fig. 10a (seed 002 §5: "two-part policy"): ParSplice reads a small key
-- space very hard at the start of a run, so a small cache then overloads the persistent
-- store. This policy leaves the cache unlimited until it has grown past `absorb` objects
-- (the burst is over), remembers that with WRstate (so it survives a policy reload), and
-- from then on keeps the cache at n objects like fixed.lua.
--
-- Parameters:
--   n       objects to keep once the burst is absorbed (default 10000)
--   absorb  cache size that marks the burst as absorbed (default 100000)

function when()
  local size = servers[whoami].cachesize
  if size > (params.n or 10000) then
    if size > (params.absorb or 100000) then
      WRstate(1)
    end
    if RDstate() == 1 then
      return true
    end
  end
  return false
end

function howmuch()
  return servers[whoami].cachesize - (params.n or 10000)
end
