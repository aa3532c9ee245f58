-- A shared log's lease policy: a client keeps the range of positions it was given for
-- `params.ms` milliseconds (default 10), Malacology's delay mode. The client sizes the range
-- it asks for from what it used under its previous lease.
function lease(log)
  return {mode = "delay", ms = params.ms or 10}
end
