-- A reload changed the limits of these buckets (bucket.lua is
-- prepended): each existing key gets the expiry at which it is full under
-- its new limit, unless it already expires later, so that a lower rate or a
-- larger burst never brings a bucket back full early (a missing key is a
-- full bucket). The tokens do not change: the same state read under the new
-- limit, as admission/ratelimit's MemoryStore.Relimit keeps it.
--
-- KEYS[i]  a bucket, all of one tenant (one hash slot on a cluster)
-- ARGV[2i-1], ARGV[2i]
--          bucket i's new rate (tokens per second, > 0) and burst (> 0)
--
-- Reply: how many of the keys existed.

local now = clock()
local n = 0
for i = 1, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    local rate = tonumber(ARGV[2 * i - 1])
    local burst = tonumber(ARGV[2 * i])
    local tokens, last, expires = load(KEYS[i], rate, burst, now)
    store(KEYS[i], tokens, last, now, rate, burst, expires)
    n = n + 1
  end
end
return n
