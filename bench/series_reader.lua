-- series_reader.lua: reads timeseries() every tick and never acts. bench/server_vs_redis_ab
-- runs it (SERIES=1) to measure what recording the access series costs a GET.
function when()
  local d = timeseries()
  return d:size() < 0
end
