-- Token bucket take: the same arithmetic as admission/bucket.go, with time
-- in microseconds from the Redis server's clock.
--
-- KEYS[1]  the bucket: a hash {t = tokens, l = last refill instant, µs}
-- ARGV[1]  rate, tokens per second (> 0)
-- ARGV[2]  burst, tokens (> 0)
-- ARGV[3]  cost, tokens (> 0)
--
-- Reply: {allowed (1 or 0), tokens after the take ("%.17g", exact), now (µs)}.
-- The caller derives RetryAfter and ResetAfter from tokens, as bucket.go does.
-- The key expires when the bucket is full again: a missing key is a full
-- bucket, so nothing is lost.

-- Writes after TIME need effects replication; a no-op since Redis 5.
if redis.replicate_commands then redis.replicate_commands() end

local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local s = redis.call('HMGET', KEYS[1], 't', 'l')
local tokens = tonumber(s[1])
local last = tonumber(s[2])
if tokens == nil or last == nil then
  tokens = burst
  last = now
end

-- tokensAt: refill since last, capped at burst; a clock that went
-- backwards refills nothing.
local elapsed = now - last
if elapsed <= 0 then
  tokens = math.min(tokens, burst)
else
  tokens = math.min(burst, tokens + elapsed / 1e6 * rate)
end
-- last never moves backwards, so a stepped clock cannot mint tokens.
if now < last then
  now = last
end

local allowed = 0
if tokens >= cost then
  tokens = tokens - cost
  allowed = 1
end

-- Expire when full again (at least 1 ms).
local ttl = math.ceil((burst - tokens) / rate * 1000)
if ttl < 1 then
  ttl = 1
end
local ts = string.format('%.17g', tokens)
redis.call('HSET', KEYS[1], 't', ts, 'l', now)
redis.call('PEXPIRE', KEYS[1], ttl)

return {allowed, ts, now}
