-- Settlement of a request's usage-based cost (bucket.lua is prepended):
-- the difference between what it used and what it reserved, charged or
-- refunded over its buckets and windows, exactly once per settlement. The
-- same arithmetic as admission/ratelimit's MemoryStore.SettleAt.
--
-- KEYS[1]  the settlement's dedupe key; then per take, in order, a
--          bucket's key or a window's (its bucket key and ':w'). All share
--          the tenant's hash tag, so on a cluster they share a slot.
-- ARGV[1]  the dedupe key's TTL (ms, an integer >= 1)
-- ARGV[4i-2], ARGV[4i-1], ARGV[4i], ARGV[4i+1]
--          take i's window end (µs since the epoch; 0 for a bucket), rate
--          (tokens per second, > 0), burst (tokens, > 0) and cost (signed
--          tokens, finite: a charge above zero, a refund below)
--
-- Reply: {applied (1, or 0 when the dedupe key existed: a retry, which
-- changes nothing), now (µs)}.
--
-- A charge takes a bucket at most one burst below the tokens it holds,
-- or below zero when it holds more, so it never lifts one; a refund stops
-- at burst. The bucket is stored with the TTL until it is full again, which
-- a debt makes longer, so a bucket in debt is never forgotten. A charge
-- raises a window's units used to at most one burst above the greater of
-- burst and what they were, a refund lowers them to no less than 0, and
-- they change only while its state
-- is of the take's window (its end is the take's) and the window has not
-- ended: otherwise its quota has been renewed.

local now = clock()
if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[1]) then
  return {0, now}
end
for i = 1, #KEYS - 1 do
  local key = KEYS[i + 1]
  local wend, rate, burst, cost = tonumber(ARGV[4 * i - 2]), tonumber(ARGV[4 * i - 1]), tonumber(ARGV[4 * i]), tonumber(ARGV[4 * i + 1])
  if cost ~= 0 and wend > 0 then
    local state = redis.call('GET', key)
    if state then
      local used, last = struct.unpack('<dd', state)
      if last == wend and now < wend then
        local after = used + cost
        if cost > 0 then
          after = math.min(after, math.max(used, burst) + burst)
        else
          after = math.max(after, 0)
        end
        -- The TTL until the window's end, as window.lua's storeWindow.
        local ttl = math.min(math.max(math.ceil((wend - now) / 1000), 1), 1e15)
        redis.call('SET', key, struct.pack('<dd', after, wend), 'PX', ttl)
      end
    end
  elseif cost ~= 0 then
    local tokens, last, expires = load(key, rate, burst, now)
    local after = tokens - cost
    if cost > 0 then
      after = math.max(after, math.min(tokens, 0) - burst)
    else
      after = math.min(after, burst)
    end
    -- Unchanged (a refund of a full bucket, a charge at the floor): the
    -- stored state refills the same, so nothing is written.
    if after ~= tokens then
      store(key, after, last, now, rate, burst, expires)
    end
  end
end
return {1, now}
