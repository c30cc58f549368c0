-- Token bucket take, all or nothing over one or more buckets (bucket.lua
-- is prepended): the same arithmetic as admission/ratelimit's
-- MemoryStore.TakeAll.
--
-- KEYS[i]  a bucket. All keys share the tenant's hash tag, so on a
--          cluster they share a slot.
-- ARGV[3i-2], ARGV[3i-1], ARGV[3i]
--          bucket i's rate (tokens per second, > 0), burst (tokens, > 0)
--          and cost (tokens, > 0)
--
-- Reply: {allowed (1 or 0), tokens of bucket 1, ..., tokens of bucket n
-- (struct.pack '<d': exact, and cheaper than printing 17 digits), now
-- (µs)}. Every bucket is charged when every one
-- holds its cost (tokens after the take); otherwise none is, nothing is
-- written, and the tokens are those each bucket holds now. The caller
-- derives RetryAfter and ResetAfter from them, as bucket.go does.
--
-- A refusal writes nothing: the stored state refills from its own instant
-- exactly as a rewritten one would from now, and its TTL (the instant it
-- is full again) has not moved. Under a flood of refused requests that is
-- no write, no replication and no AOF traffic.
--
-- Needs Redis >= 5, where scripts replicate their effects, so a write after
-- TIME is allowed (3.2 and 4 would need redis.replicate_commands()).

local now = clock()
local n = #KEYS
if n == 1 then
  -- One bucket, most decisions: the same rule without the tables (a
  -- fifth of the script's time).
  local rate, burst, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
  local tokens, last, expires = load(KEYS[1], rate, burst, now)
  if tokens < cost then
    return {0, struct.pack('<d', tokens), now}
  end
  tokens = tokens - cost
  store(KEYS[1], tokens, last, now, rate, burst, expires)
  return {1, struct.pack('<d', tokens), now}
end
local tokens, lasts, expires = {}, {}, {}
local allowed = 1
for i = 1, n do
  tokens[i], lasts[i], expires[i] = load(KEYS[i], tonumber(ARGV[3 * i - 2]), tonumber(ARGV[3 * i - 1]), now)
  if tokens[i] < tonumber(ARGV[3 * i]) then
    allowed = 0
  end
end

if allowed == 1 then
  for i = 1, n do
    tokens[i] = tokens[i] - tonumber(ARGV[3 * i])
    store(KEYS[i], tokens[i], lasts[i], now, tonumber(ARGV[3 * i - 2]), tonumber(ARGV[3 * i - 1]), expires[i])
  end
end

local reply = {allowed}
for i = 1, n do
  reply[i + 1] = struct.pack('<d', tokens[i])
end
reply[n + 2] = now
return reply
