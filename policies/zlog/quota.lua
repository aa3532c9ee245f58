-- A shared log's lease policy: a client is given `params.n` positions at once (default 100)
-- and uses them all before it asks again, Malacology's quota mode.
function lease(log)
  return {mode = "quota", n = params.n or 100}
end
