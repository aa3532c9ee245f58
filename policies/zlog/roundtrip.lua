-- A shared log's lease policy: every client asks the sequencer for each position
-- (docs/shared-log.md, "Lease policy"). Lowest latency per position under contention, and
-- no positions held by a client that might leave holes.
function lease(log)
  return {mode = "roundtrip"}
end
