-- A settled request's usage at the fair global backstop (decay.lua is
-- prepended): internal/fairshare's Backstop.Settle on backstop.lua's hash,
-- with time in µs from the Redis server's clock.
--
-- KEYS[1]  backstop.lua's hash
-- ARGV[1]  rate, tokens per second (> 0)
-- ARGV[2]  burst, tokens (> 0)
-- ARGV[3]  window: the rates' time constant, µs (> 0)
-- ARGV[4]  tenant ID
-- ARGV[5]  cost: what the request used less what it reserved, tokens
--          (signed, finite, not 0)
-- ARGV[6]  share of the rate divided into fair shares (0.9)
--
-- Reply: the bucket's tokens after the settlement ("%.17g"), or "" when
-- the hash is gone (nothing was reserved that a settlement could meet).
--
-- The tenant's demand and admitted rates count the cost, never below
-- zero; then a charge takes what the bucket holds above the floor of a
-- critical take of the tenant (-burst within its fair share, by its
-- rates with the cost, 0 above it) and the tenant owes the rest, which
-- its next takes pay first (backstop.lua); a refund pays what it owes
-- first, then fills the bucket, no higher than burst. A tenant the hash
-- no longer holds is not written, and owes nothing. The key's expiry is kept, or moved to when the
-- bucket is full again, when that is later.

local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tau = tonumber(ARGV[3]) / 1e6
local field = 't:' .. ARGV[4]
local cost = tonumber(ARGV[5])
local shareOf = tonumber(ARGV[6])

local st = redis.call('HMGET', KEYS[1], 'g', field)
if not st[1] then
  return ''
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tokens, last, level, levelAt, weights, expires
if #st[1] >= 48 then
  tokens, last, level, levelAt, weights, expires = struct.unpack('<dddddd', st[1])
else
  tokens, last, level, levelAt, weights = struct.unpack('<ddddd', st[1])
  expires = 0
end
if now > last then
  tokens = math.min(burst, tokens + (now - last) / 1e6 * rate)
  last = now
end
local demand, admitted, at, weight, owed
local critical = 0
if st[2] then
  owed = 0
  if #st[2] >= 40 then
    demand, admitted, at, weight, owed = struct.unpack('<ddddd', st[2])
  else
    demand, admitted, at, weight = struct.unpack('<dddd', st[2])
  end
  demand = math.max(decayed(demand, at, now, tau) + cost / tau, 0)
  admitted = math.max(decayed(admitted, at, now, tau) + cost / tau, 0)
  at = math.max(at, now)
  if admitted < shareFor(level, weights, weight, rate, shareOf) then
    critical = -burst
  end
end
if cost > 0 then
  local take = math.min(cost, math.max(tokens - critical, 0))
  tokens = tokens - take
  if owed then
    owed = owed + cost - take
  end
else
  local paid = 0
  if owed then
    paid = math.min(owed, -cost)
    owed = owed - paid
  end
  tokens = math.min(tokens - cost - paid, burst)
end
local full = now + math.ceil((burst - tokens) / rate * 1e6)
if full > expires then
  expires = full
  local ttl = math.ceil((expires - now) / 1000)
  if ttl > 1e15 then
    ttl = 1e15
  end
  redis.call('PEXPIRE', KEYS[1], math.max(ttl, 1))
end
redis.call('HSET', KEYS[1], 'g', struct.pack('<dddddd', tokens, last, level, levelAt, weights, expires))
if owed then
  redis.call('HSET', KEYS[1], field, struct.pack('<ddddd', demand, admitted, at, weight, owed))
end
return string.format('%.17g', tokens)
