#!lua name=ratelimit
-- A token-bucket rate limiter, one bucket per key.
--
-- A bucket holds up to `capacity` tokens and gains `rate` tokens per second; a request takes
-- `cost` tokens (default 1) if the bucket has them. The bucket's state is one value,
-- "<tokens>:<last refill, ms>", that expires once the bucket would be full again, so idle
-- buckets cost nothing. The caller passes its clock (`now_ms`, milliseconds): the function
-- is then deterministic, and a client whose clock runs behind the bucket's last refill gains
-- no tokens (time never runs backwards for a bucket).
--
--   FCALL rl_take 1 <bucket> <capacity> <rate per second> <now_ms> [cost]
--     -> {allowed (1 or 0), tokens left, ms until `cost` tokens are available (0 if allowed)}
--   FCALL_RO rl_peek 1 <bucket> <capacity> <rate per second> <now_ms>
--     -> tokens available now (rounded down)
--
-- Load with `redis-cli -x FUNCTION LOAD REPLACE < functions/ratelimit.lua`.

local function number(value, what)
  local n = tonumber(value)
  if n == nil or n ~= n or n < 0 then
    error({err = "ERR rate limiter: " .. what .. " must be a non-negative number"})
  end
  return n
end

-- Tokens in the bucket at `now`, and the time they were counted at.
local function level(key, capacity, rate, now)
  local state = redis.call('GET', key)
  if not state then
    return capacity, now
  end
  local tokens, last = string.match(state, '^([%d%.]+):(%d+)$')
  tokens, last = tonumber(tokens), tonumber(last)
  if tokens == nil or last == nil then
    return capacity, now
  end
  if now < last then
    now = last
  end
  return math.min(capacity, tokens + (now - last) * rate / 1000), now
end

local function take(keys, args)
  local capacity = number(args[1], 'capacity')
  local rate = number(args[2], 'rate')
  local now = number(args[3], 'now_ms')
  local cost = number(args[4] or 1, 'cost')
  local tokens, at = level(keys[1], capacity, rate, now)
  local allowed = tokens >= cost
  if allowed then
    tokens = tokens - cost
  end
  local wait = 0
  if not allowed then
    if rate == 0 then
      wait = -1
    else
      wait = math.ceil((cost - tokens) * 1000 / rate)
    end
  end
  -- Expire once full again: the absent bucket reads as full.
  local full_in = 1
  if rate > 0 then
    full_in = math.max(1, math.ceil((capacity - tokens) * 1000 / rate))
  end
  redis.call('SET', keys[1], string.format('%.6f:%d', tokens, at), 'PX', full_in)
  return {allowed and 1 or 0, math.floor(tokens), wait}
end

local function peek(keys, args)
  local capacity = number(args[1], 'capacity')
  local rate = number(args[2], 'rate')
  local now = number(args[3], 'now_ms')
  local tokens = level(keys[1], capacity, rate, now)
  return math.floor(tokens)
end

redis.register_function('rl_take', take)
redis.register_function{
  function_name = 'rl_peek',
  callback = peek,
  flags = {'no-writes'},
  description = 'tokens available in a bucket now',
}
