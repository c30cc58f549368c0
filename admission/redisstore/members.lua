-- The fleet's membership: KEYS[1] is a sorted set of instance IDs, each
-- scored by when its entry expires (ms, on Redis's clock, so the instances'
-- clocks need not agree). ARGV[1] is this instance's ID, ARGV[2] the
-- entry's time to live (ms), ARGV[3] "join" (add or renew the entry) or
-- "leave" (remove it). Expired entries are dropped; the reply is the number
-- of live entries.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if ARGV[3] == 'leave' then
  redis.call('ZREM', KEYS[1], ARGV[1])
else
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
end
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then
  -- The set lives as long as its last entry: a fleet that is gone leaves
  -- nothing behind.
  redis.call('PEXPIREAT', KEYS[1], last[2])
end
return redis.call('ZCARD', KEYS[1])
