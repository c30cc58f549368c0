-- Sync mode's reconciliation of one bucket (bucket.lua is prepended): the
-- same bucket as take.lua, debited with what one instance admitted
-- locally since its last sync. The bucket may go below zero: that debt is
-- tokens the fleet admitted beyond the quota, and the refill repays it
-- before anyone is admitted again, so the fleet converges to the quota.
-- The debt is capped at one burst.
--
-- KEYS[1]  the bucket
-- ARGV[1]  rate, tokens per second (> 0)
-- ARGV[2]  burst, tokens (> 0)
-- ARGV[3]  used: tokens this instance took since its last sync (>= 0)
--
-- Reply: {tokens after the debit ("%.17g"; negative is debt), now (µs)}.
-- Nothing is written when used is 0.

local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local used = tonumber(ARGV[3])

local now = clock()
local tokens, last = load(KEYS[1], rate, burst, now)
if used > 0 then
  tokens = math.max(tokens - used, -burst)
  store(KEYS[1], tokens, last, now, rate, burst)
end
return {string.format('%.17g', tokens), now}
