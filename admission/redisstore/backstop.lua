-- The fair global backstop: the same arithmetic as internal/fairshare's
-- Backstop.Take, with time in microseconds from the Redis server's clock so
-- that every instance shares one bucket and one view of the tenants' rates.
--
-- KEYS[1]  a hash. Field "g": struct.pack '<dddddd' (tokens, last refill
--          µs, level λ or -1 for none above share, level computed at µs,
--          sum of the weights counted then, the instant in µs at which the
--          key expires; a 40-byte '<ddddd' reads as expiring at 0). Field
--          "t:<tenant>": '<ddddd' (demand rate, admitted rate, at µs,
--          weight, owed: what its settlements charged beyond what the
--          bucket could give it, backstopsettle.lua; a 32-byte '<dddd'
--          owes nothing).
-- ARGV[1]  rate, tokens per second (> 0)
-- ARGV[2]  burst, tokens (> 0)
-- ARGV[3]  window: the rates' time constant, µs (> 0)
-- ARGV[4]  recompute the level at most every this many µs
-- ARGV[5]  share of the rate divided into fair shares (0.9)
-- ARGV[6]  tenant ID
-- ARGV[7]  the tenant's weight (> 0)
-- ARGV[8]  cost, tokens (> 0)
-- ARGV[9]  class: 0 critical, 1 default, 2 sheddable (an above-share
--          request must leave class quarters of burst)
--
-- Reply: {allowed (1 or 0), within share (1 or 0), use, share, tokens,
-- retry after in seconds (all "%.17g"), now (µs)}.
--
-- The level needs every tenant's demand: it is recomputed from the whole
-- hash (HGETALL) at most every ARGV[4] µs, by whichever call comes first,
-- and tenants whose demand has decayed to nothing are deleted then. The key
-- expires 10 windows after the last call (the tenants' rates have decayed to
-- nothing by then), but never before the bucket is full at the call's rate
-- (a missing key is a full bucket), nor earlier than a previous call set
-- (a call under a higher rate, before a reload lowered it, cannot shorten
-- it).

local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local window = tonumber(ARGV[3])
local every = tonumber(ARGV[4])
local shareOf = tonumber(ARGV[5])
local tenant = ARGV[6]
local weight = tonumber(ARGV[7])
local cost = tonumber(ARGV[8])
local class = tonumber(ARGV[9])
local tau = window / 1e6

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local field = 't:' .. tenant
local st = redis.call('HMGET', KEYS[1], 'g', field)
local tokens, last, level, levelAt, weights, expires = burst, now, -1, 0, 0, 0
if st[1] then
  if #st[1] >= 48 then
    tokens, last, level, levelAt, weights, expires = struct.unpack('<dddddd', st[1])
  else
    tokens, last, level, levelAt, weights = struct.unpack('<ddddd', st[1])
  end
end
if now > last then
  tokens = math.min(burst, tokens + (now - last) / 1e6 * rate)
  last = now
end

local demand, admitted, at, owed = 0, 0, now, 0
if st[2] then
  if #st[2] >= 40 then
    local w
    demand, admitted, at, w, owed = struct.unpack('<ddddd', st[2])
  else
    demand, admitted, at = struct.unpack('<dddd', st[2])
  end
end
demand = decayed(demand, at, now, tau) + cost / tau
admitted = decayed(admitted, at, now, tau)
at = math.max(at, now)

if now - levelAt >= every or now < levelAt or (tokens < cost and level < 0) then
  -- Weighted max-min level of shareOf × rate among the demands.
  local all = redis.call('HGETALL', KEYS[1])
  local ds = {}
  local gone = {}
  -- The caller counts even on its first call, before its field exists.
  ds[1] = {demand, weight}
  weights = weight
  for i = 1, #all, 2 do
    local f = all[i]
    if f ~= field and string.sub(f, 1, 2) == 't:' then
      local d, _, a, w = struct.unpack('<dddd', all[i + 1])
      d = decayed(d, a, now, tau)
      if d < rate * 1e-6 then
        gone[#gone + 1] = f
      else
        ds[#ds + 1] = {d, w}
        weights = weights + w
      end
    end
  end
  if #gone > 0 then
    redis.call('HDEL', KEYS[1], unpack(gone))
  end
  table.sort(ds, function(x, y) return x[1] / x[2] < y[1] / y[2] end)
  local remaining, ws = shareOf * rate, weights
  level = -1
  for _, d in ipairs(ds) do
    local lambda = remaining / ws
    if d[1] / d[2] > lambda then
      level = math.max(lambda, 0)
      break
    end
    remaining = remaining - d[1]
    ws = ws - d[2]
  end
  levelAt = now
end

local use = decayed(admitted, at, now, tau)
local share = shareFor(level, weights, weight, rate, shareOf)
local within = 0
local floor = math.min(class, 2) * burst / 4
if use < share then
  within = 1
  floor = -burst
end

-- What the tenant owes is paid first, from what the bucket holds above
-- its critical floor (fairshare.JudgeOwing); while any is left, the
-- request is refused, as one of its cost and the debt.
if owed > 0 then
  local critical = 0
  if within == 1 then
    critical = -burst
  end
  local pay = math.min(owed, math.max(tokens - critical, 0))
  tokens = tokens - pay
  owed = owed - pay
end

local allowed = 0
local retry = 0
if owed <= 0 and tokens - cost >= floor then
  owed = 0
  tokens = tokens - cost
  admitted = admitted + cost / tau
  allowed = 1
elseif owed > 0 then
  -- Repaid when the refill has brought the debt and the cost above the
  -- floor (fairshare.JudgeOwing).
  retry = (cost + owed + floor - tokens) / rate
else
  retry = (cost + floor - tokens) / rate
  if within == 0 and share > 0 then
    retry = math.min(retry, tau * math.log(use / share))
  end
  if retry < 0 then
    retry = 0
  end
end

local ttl = math.ceil(math.max(10 * window / 1000,
  (math.max(last, now) - now) / 1000 + (burst - tokens) / rate * 1000, (expires - now) / 1000))
-- PEXPIRE wants an integer; Lua prints 1e17 and above in exponent form.
if ttl > 1e15 then
  ttl = 1e15
end
redis.call('HSET', KEYS[1], 'g', struct.pack('<dddddd', tokens, last, level, levelAt, weights, now + ttl * 1000),
  field, struct.pack('<ddddd', demand, admitted, at, weight, owed))
redis.call('PEXPIRE', KEYS[1], ttl)

return {allowed, within, string.format('%.17g', use), string.format('%.17g', share),
  string.format('%.17g', tokens), string.format('%.17g', retry), now}
