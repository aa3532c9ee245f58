-- A shared log's lease policy that follows contention (Malacology §ZLog: leases trade the
-- latency other clients see for throughput). While few clients use a log, the one appending
-- holds the sequencer (a quota sized to about `params.hold_ms` of its rate, default 10 ms);
-- once more than `params.max_clients` (default 2) contend, everyone makes round trips so no
-- client waits behind another's lease or leaves holes when it stops.
local function quota_for(log)
  local hold = (params.hold_ms or 10) / 1000
  local per_client = log.positions / math.max(log.clients, 1)
  local n = math.floor(per_client * hold)
  return math.max(16, math.min(n, 65536))
end

function lease(log)
  if log.clients > (params.max_clients or 2) then
    return {mode = "roundtrip"}
  end
  if log.rate == 0 then
    return {mode = "quota", n = 16}
  end
  return {mode = "quota", n = quota_for(log)}
end
