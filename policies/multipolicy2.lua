-- multipolicy2.lua: absorb the initial burst, then hold a fixed size per workload regime;
-- the switch point and every size come from what the policy observes. Needs no parameters.
--
-- multipolicy.lua (seed 000 §IV, Fig. 10a; seed 002 §5) leaves the cache unlimited until it
-- holds `absorb` objects, then keeps it at `n`, two numbers swept by hand for one run. Here:
--
-- * The switch point is seed 002 §6's: k-means (k = 4, time and read rate scaled to [0, 1]
--   and weighted equally, initial centroids at evenly spaced points in time order, as in
--   `mantle analyze`) over the read rate of each minute seen so far. The burst is absorbed
--   once the newest minute falls in the third regime or later, the regimes' read rates
--   never rise from one to the next, and the newest reads more slowly than the first: the
--   flash crowd of redundant reads has passed (seed 002 switches at the third regime).
-- * The size after the switch is fixed within a regime and re-derived when k-means puts the
--   newest minute in a new regime: n = the largest working set measured during the regime
--   that ended (at the switch: during the burst), never less than the working set now.
--   The working set is dscache2.lua's measure: distinct keys read within the longest reuse
--   age seen (timeseries():openfans() / :distinct()) plus the most keys created in one tick.
--
-- State (WRstate, survives reloads): {absorbed = 0|1, n = size in force}.
-- Parameters: none.

local BUCKET = 60          -- seconds per read-rate point (the unit of seed 002's series)
local K = 4                -- regimes, as seed 002 §6
local rates, times = {}, {}
local bucket_start, gets_at_start = nil, nil
local newmax = 0
local target = nil

-- Seed 002's k-means over (time, rate), both scaled to [0, 1]; returns the time rank of the
-- newest point's cluster and the centroid rates (scaled) by time rank.
local function newest_regime()
  local n = #rates
  local k = math.min(K, n)
  local lo_r, hi_r = math.huge, -math.huge
  for i = 1, n do
    if rates[i] < lo_r then lo_r = rates[i] end
    if rates[i] > hi_r then hi_r = rates[i] end
  end
  local span_r = hi_r > lo_r and hi_r - lo_r or 1
  local span_t = times[n] > times[1] and times[n] - times[1] or 1
  local px, py = {}, {}
  for i = 1, n do
    px[i] = (times[i] - times[1]) / span_t
    py[i] = (rates[i] - lo_r) / span_r
  end
  local cx, cy = {}, {}
  for c = 1, k do
    local i = (2 * (c - 1) + 1) * n // (2 * k) + 1
    cx[c], cy[c] = px[i], py[i]
  end
  local label = {}
  for _ = 1, 100 do
    local changed = false
    for i = 1, n do
      local best, bd = 1, math.huge
      for c = 1, k do
        local d = (px[i] - cx[c]) ^ 2 + (py[i] - cy[c]) ^ 2
        if d < bd then best, bd = c, d end
      end
      if label[i] ~= best then label[i], changed = best, true end
    end
    if not changed then break end
    local sx, sy, sn = {}, {}, {}
    for c = 1, k do sx[c], sy[c], sn[c] = 0, 0, 0 end
    for i = 1, n do
      local c = label[i]
      sx[c], sy[c], sn[c] = sx[c] + px[i], sy[c] + py[i], sn[c] + 1
    end
    for c = 1, k do
      if sn[c] > 0 then cx[c], cy[c] = sx[c] / sn[c], sy[c] / sn[c] end
    end
  end
  -- Rank clusters by centroid time.
  local order = {}
  for c = 1, k do order[c] = c end
  table.sort(order, function(a, b) return cx[a] < cx[b] end)
  local rank, rate_by_rank = {}, {}
  for r, c in ipairs(order) do rank[c], rate_by_rank[r] = r, cy[c] end
  return rank[label[n]], rate_by_rank
end

local function working_set(d)
  local open = d:openfans(0.25)
  if open.new_keys > newmax then newmax = open.new_keys end
  return d:distinct(now - math.max(open.record, 1)) + newmax
end

function when()
  local d = timeseries()
  -- Without an access log (a host that keeps none) there is no working set to size from.
  if d:size() == 0 then return false end
  local state = RDstate()
  if type(state) ~= "table" then state = {absorbed = 0, n = 0} end
  local gets = servers[whoami].gets
  if bucket_start == nil then bucket_start, gets_at_start = now, gets end
  local ws = working_set(d)
  if now - bucket_start >= BUCKET then
    rates[#rates + 1] = (gets - gets_at_start) / (now - bucket_start)
    times[#times + 1] = now
    bucket_start, gets_at_start = now, gets
    -- Two minutes per regime before k-means can tell a plateau from noise.
    if state.absorbed == 0 and #rates >= 2 * K then
      local r, rate_by_rank = newest_regime()
      -- Seed 002: switch from the third regime on, once the rate has come down regime by
      -- regime (plateau, decline, lower plateau), i.e. the burst has been absorbed.
      local declined = r >= 3 and rate_by_rank[r] < rate_by_rank[1]
      for i = 2, r do
        if rate_by_rank[i] > rate_by_rank[i - 1] then declined = false end
      end
      if declined then state = {absorbed = 1, n = 0} end
    end
  end
  if state.absorbed == 1 and ws > state.n and ws >= 1 then
    state = {absorbed = 1, n = ws}
  end
  WRstate(state)
  if state.absorbed == 0 then return false end
  target = state.n
  return servers[whoami].capacity ~= target
end

function howmuch()
  return {capacity = target}
end
