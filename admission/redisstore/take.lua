-- Token bucket take, all or nothing over one or more buckets: the same
-- arithmetic as admission/ratelimit's bucket.go and MemoryStore.TakeAll,
-- with time in microseconds from the Redis server's clock.
--
-- KEYS[i]  a bucket: a string of two little-endian doubles, struct.pack
--          '<dd' (tokens, last refill instant in µs). All keys share the
--          tenant's hash tag, so on a cluster they share a slot.
-- ARGV[3i-2], ARGV[3i-1], ARGV[3i]
--          bucket i's rate (tokens per second, > 0), burst (tokens, > 0)
--          and cost (tokens, > 0)
--
-- Reply: {allowed (1 or 0), tokens of bucket 1, ..., tokens of bucket n
-- ("%.17g", exact), now (µs)}. Every bucket is charged when every one
-- holds its cost (tokens after the take); otherwise none is, nothing is
-- written, and the tokens are those each bucket holds now. The caller
-- derives RetryAfter and ResetAfter from them, as bucket.go does.
--
-- A refusal writes nothing: the stored state refills from its own instant
-- exactly as a rewritten one would from now, and its TTL (the instant it
-- is full again) has not moved. Under a flood of refused requests that is
-- no write, no replication and no AOF traffic.
--
-- A key expires when its bucket is full again: a missing key is a full
-- bucket, so nothing is lost.
--
-- Needs Redis >= 5, where scripts replicate their effects, so a write after
-- TIME is allowed (3.2 and 4 would need redis.replicate_commands()).

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local n = #KEYS
local tokens, lasts = {}, {}
local allowed = 1
for i = 1, n do
  local rate = tonumber(ARGV[3 * i - 2])
  local burst = tonumber(ARGV[3 * i - 1])
  local cost = tonumber(ARGV[3 * i])
  local tk, last = burst, now
  local state = redis.call('GET', KEYS[i])
  if state then
    tk, last = struct.unpack('<dd', state)
  end
  -- tokensAt: refill since last, capped at burst; a clock that went
  -- backwards refills nothing.
  local elapsed = now - last
  if elapsed <= 0 then
    tk = math.min(tk, burst)
  else
    tk = math.min(burst, tk + elapsed / 1e6 * rate)
  end
  if tk < cost then
    allowed = 0
  end
  tokens[i], lasts[i] = tk, last
end

if allowed == 1 then
  for i = 1, n do
    local rate = tonumber(ARGV[3 * i - 2])
    local burst = tonumber(ARGV[3 * i - 1])
    tokens[i] = tokens[i] - tonumber(ARGV[3 * i])
    -- last never moves backwards, so a stepped clock cannot mint tokens.
    local last = math.max(now, lasts[i])
    -- Expire when full again (at least 1 ms), counted from Redis's real
    -- clock: when it went backwards, the bucket is full only
    -- (last - now) later.
    local ttl = math.ceil((last - now) / 1000 + (burst - tokens[i]) / rate * 1000)
    if ttl < 1 then
      ttl = 1
    end
    -- PX wants an integer; Lua prints 1e17 and above in exponent form.
    if ttl > 1e15 then
      ttl = 1e15
    end
    redis.call('SET', KEYS[i], struct.pack('<dd', tokens[i], last), 'PX', ttl)
  end
end

local reply = {allowed}
for i = 1, n do
  reply[i + 1] = string.format('%.17g', tokens[i])
end
reply[n + 2] = now
return reply
