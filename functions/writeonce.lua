#!lua name=writeonce
-- Write-once positions guarded by an epoch: the storage contract of ZLog/CORFU (seed 003's
-- shared log, issue 27), as object interfaces.
--
-- A log stripe is an object with a sealed epoch and positions. Every operation carries the
-- caller's epoch; one lower than the sealed epoch is refused with -ESTALE, so a client that
-- missed a reconfiguration can never write or read through it. A position is written at
-- most once: a second write gets -EROFS, whatever its data. `fill` marks an unwritten
-- position as junk (idempotent; -EROFS if it holds data), so a reader can skip a hole a
-- failed writer left. `seal` raises the epoch; it must go up (-ESTALE otherwise), and returns
-- the highest position written so far, what a new sequencer starts from.
--
-- Keys: every call names the stripe's epoch key; position operations also name the
-- position's key, and operations that can raise the stripe's highest position its maxpos key
-- (kept so that `seal` needs no key scan). In a cluster they must share a slot: use one hash
-- tag per stripe, e.g. `{log7}:epoch`, `{log7}:maxpos` and `{log7}:pos:42`.
--
--   FCALL wo_write 3 <pos key> <epoch key> <maxpos key> <epoch> <position> <data>  -> OK
--   FCALL wo_fill  3 <pos key> <epoch key> <maxpos key> <epoch> <position>         -> OK
--   FCALL_RO wo_read 2 <pos key> <epoch key> <epoch>
--       -> data | -ERANGE (not written) | -ENODATA (filled)
--   FCALL wo_seal  2 <epoch key> <maxpos key> <epoch>   -> highest position written (-1: none)
--   FCALL_RO wo_epoch 1 <epoch key>                     -> sealed epoch (0: never sealed)
--
-- Values are tagged: "d" + data for a write, "f" for a fill.
--
-- Load with `redis-cli -x FUNCTION LOAD REPLACE < functions/writeonce.lua`.

local function epoch_arg(value)
  local n = tonumber(value)
  if n == nil or n < 0 or n ~= math.floor(n) then
    error({err = 'ERR writeonce: the epoch must be a non-negative integer'})
  end
  return n
end

local function sealed(epoch_key)
  return tonumber(redis.call('GET', epoch_key) or '0') or 0
end

local function check_epoch(epoch_key, epoch)
  local current = sealed(epoch_key)
  if epoch < current then
    error({err = string.format('ESTALE epoch %d is older than the sealed epoch %d', epoch, current)})
  end
end

local function raise_maxpos(maxpos_key, position)
  local n = tonumber(position)
  if n == nil or n < 0 or n ~= math.floor(n) then
    error({err = 'ERR writeonce: the position must be a non-negative integer'})
  end
  local max = tonumber(redis.call('GET', maxpos_key) or '-1')
  if n > max then
    redis.call('SET', maxpos_key, string.format('%d', n))
  end
end

local function write(keys, args)
  local epoch = epoch_arg(args[1])
  check_epoch(keys[2], epoch)
  if redis.call('GET', keys[1]) then
    return redis.error_reply('EROFS position already written')
  end
  raise_maxpos(keys[3], args[2])
  redis.call('SET', keys[1], 'd' .. (args[3] or ''))
  return redis.status_reply('OK')
end

local function fill(keys, args)
  local epoch = epoch_arg(args[1])
  check_epoch(keys[2], epoch)
  local current = redis.call('GET', keys[1])
  if current == 'f' then
    return redis.status_reply('OK')
  end
  if current then
    return redis.error_reply('EROFS position holds data')
  end
  raise_maxpos(keys[3], args[2])
  redis.call('SET', keys[1], 'f')
  return redis.status_reply('OK')
end

local function read(keys, args)
  check_epoch(keys[2], epoch_arg(args[1]))
  local value = redis.call('GET', keys[1])
  if not value then
    return redis.error_reply('ERANGE position not written')
  end
  if value == 'f' then
    return redis.error_reply('ENODATA position was filled')
  end
  return string.sub(value, 2)
end

local function seal(keys, args)
  local epoch = epoch_arg(args[1])
  local current = sealed(keys[1])
  if epoch <= current then
    return redis.error_reply(string.format('ESTALE epoch %d is not above the sealed epoch %d', epoch, current))
  end
  redis.call('SET', keys[1], string.format('%d', epoch))
  return tonumber(redis.call('GET', keys[2]) or '-1')
end

local function current_epoch(keys)
  return sealed(keys[1])
end

redis.register_function('wo_write', write)
redis.register_function('wo_fill', fill)
redis.register_function('wo_seal', seal)
redis.register_function{function_name = 'wo_read', callback = read, flags = {'no-writes'}}
redis.register_function{function_name = 'wo_epoch', callback = current_epoch, flags = {'no-writes'}}
