-- Sync mode's reconciliation of one shard of the fair global backstop
-- (bucket.lua is prepended). The backstop is split into shards, each a
-- part of the bucket (rate/S, burst/S) and the fleet's rates of the
-- tenants that hash to it, both under one hash tag of the shard's own (on
-- Redis Cluster, shards' tags are spread over the masters). Each
-- instance pushes, once per interval, what it admitted (the bucket part
-- debited with its share of it) and what its tenants of the shard asked
-- and were admitted, and pulls the part's tokens and the fleet's rates of
-- every tenant of the shard, from which it computes the fair level.
--
-- KEYS[1]  the shard's part of the bucket (bucket.lua's format)
-- KEYS[2]  the shard's tenants: a hash, field = tenant ID, value
--          struct.pack '<dddd' (demand rate, admitted rate, at µs, weight)
-- ARGV[1]  the part's rate, tokens per second (> 0)
-- ARGV[2]  the part's burst, tokens (> 0)
-- ARGV[3]  used: tokens this instance took from the part since its last
--          reconciliation (negative when settlements refunded more than
--          it took: the part is credited, never above its burst)
-- ARGV[4]  the most the part may go below zero (>= its burst: the
--          reserve, and the fleet's debt beyond it)
-- ARGV[5]  window: the rates' time constant, µs (> 0)
-- ARGV[6]  the backstop's whole rate (tenants whose demand has decayed
--          below a millionth of it are forgotten)
-- ARGV[7+4i], ARGV[8+4i], ARGV[9+4i], ARGV[10+4i]  (i = 0, 1, …)
--          a tenant ID, the tokens it asked for and was admitted on this
--          instance since the last reconciliation (settlements included,
--          so either may be negative; a rate never goes below zero), and
--          its weight
--
-- Reply: {struct.pack '<d' of the part's tokens after the debit (negative
-- is the reserve in use, or debt), now (µs), then for each remembered
-- tenant: ID, demand rate, admitted rate (both "%.17g", at now), weight
-- ("%.17g")}.

local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local used = tonumber(ARGV[3])
local debt = tonumber(ARGV[4])
local window = tonumber(ARGV[5])
local whole = tonumber(ARGV[6])
local tau = window / 1e6

local now = clock()
local tokens, last, expires = load(KEYS[1], rate, burst, now)
if used > 0 then
  tokens = math.max(tokens - used, -debt)
  store(KEYS[1], tokens, last, now, rate, burst, expires)
elseif used < 0 then
  tokens = math.min(tokens - used, burst)
  store(KEYS[1], tokens, last, now, rate, burst, expires)
end

for i = 7, #ARGV, 4 do
  local id = ARGV[i]
  local demand, admitted, at, weight = 0, 0, now, tonumber(ARGV[i + 3])
  local st = redis.call('HGET', KEYS[2], id)
  if st then
    demand, admitted, at = struct.unpack('<dddd', st)
  end
  demand = math.max(decayed(demand, at, now, tau) + tonumber(ARGV[i + 1]) / tau, 0)
  admitted = math.max(decayed(admitted, at, now, tau) + tonumber(ARGV[i + 2]) / tau, 0)
  redis.call('HSET', KEYS[2], id, struct.pack('<dddd', demand, admitted, math.max(at, now), weight))
end

local reply = {struct.pack('<d', tokens), now}
local all = redis.call('HGETALL', KEYS[2])
local gone = {}
for i = 1, #all, 2 do
  local demand, admitted, at, weight = struct.unpack('<dddd', all[i + 1])
  demand = decayed(demand, at, now, tau)
  if demand < whole * 1e-6 then
    gone[#gone + 1] = all[i]
  else
    reply[#reply + 1] = all[i]
    reply[#reply + 1] = string.format('%.17g', demand)
    reply[#reply + 1] = string.format('%.17g', decayed(admitted, at, now, tau))
    reply[#reply + 1] = string.format('%.17g', weight)
  end
end
if #gone > 0 then
  redis.call('HDEL', KEYS[2], unpack(gone))
end
if #all > 2 * #gone then
  -- The tenants' rates have decayed to nothing 10 windows after the last
  -- reconciliation.
  redis.call('PEXPIRE', KEYS[2], math.ceil(10 * window / 1000))
end
return reply
