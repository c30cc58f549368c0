-- Sync mode's reconciliation of buckets (bucket.lua is prepended): each
-- the same bucket as take.lua, debited with what one instance admitted
-- locally from it since its last sync. A bucket may go below zero: that
-- debt is tokens the fleet admitted beyond the quota, and the refill
-- repays it before anyone is admitted again, so the fleet converges to
-- the quota. The debt is capped at the most the fleet can owe (the
-- caller's debt argument, see syncer): a lower cap would forgive tokens
-- admitted beyond the quota every interval.
--
-- KEYS[i]  a bucket (several in one call on a single node; one on a
--          cluster, where keys of one call must share a slot)
-- ARGV[4i-3], ARGV[4i-2], ARGV[4i-1], ARGV[4i]
--          bucket i's rate (tokens per second, > 0), burst (tokens, > 0),
--          used: tokens this instance took since its last sync (negative
--          when more was given back than taken),
--          and debt: the most the bucket may go below zero (>= burst)
--
-- Reply: {tokens of bucket 1 after the debit, ..., tokens of bucket n
-- (struct.pack '<d', exact; negative is debt), now (µs)}. A bucket with nothing used is
-- not written.

local now = clock()
local reply = {}
for i = 1, #KEYS do
  local rate = tonumber(ARGV[4 * i - 3])
  local burst = tonumber(ARGV[4 * i - 2])
  local used = tonumber(ARGV[4 * i - 1])
  local debt = tonumber(ARGV[4 * i])
  local tokens, last, expires = load(KEYS[i], rate, burst, now)
  if used ~= 0 then
    -- A negative used gives back tokens taken and then undone (an exact
    -- bucket of the same request refused).
    tokens = math.min(burst, math.max(tokens - used, -debt))
    store(KEYS[i], tokens, last, now, rate, burst, expires)
  end
  reply[i] = struct.pack('<d', tokens)
end
reply[#KEYS + 1] = now
return reply
