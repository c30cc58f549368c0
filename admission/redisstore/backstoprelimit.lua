-- A reload lowered the global backstop's rate (or raised its burst): its
-- hash (backstop.lua) gets the expiry at which the bucket is full under the
-- new limit, unless it already expires later, so that the change does not
-- refill it (a missing hash is a full bucket). Nothing else changes.
--
-- KEYS[1]  the backstop's hash
-- ARGV[1]  the new rate, tokens per second (> 0)
-- ARGV[2]  the new burst, tokens (> 0)
--
-- Reply: 1 if the hash existed, else 0.

local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local g = redis.call('HGET', KEYS[1], 'g')
if not g then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tokens, last, level, levelAt, weights, expires
if #g >= 48 then
  tokens, last, level, levelAt, weights, expires = struct.unpack('<dddddd', g)
else
  tokens, last, level, levelAt, weights = struct.unpack('<ddddd', g)
  expires = 0
end
-- The tokens at max(now, last), as backstop.lua would read them (the
-- stored state is kept as it is).
local at = math.max(now, last)
local full = tokens
if now > last then
  full = full + (now - last) / 1e6 * rate
end
full = math.min(burst, full)
local ttl = math.ceil(math.max((at - now) / 1000 + (burst - full) / rate * 1000,
  (expires - now) / 1000, redis.call('PTTL', KEYS[1])))
if ttl > 1e15 then
  ttl = 1e15
end
if ttl < 1 then
  ttl = 1
end
redis.call('HSET', KEYS[1], 'g', struct.pack('<dddddd', tokens, last, level, levelAt, weights, now + ttl * 1000))
redis.call('PEXPIRE', KEYS[1], ttl)
return 1
