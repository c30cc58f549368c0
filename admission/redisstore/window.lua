-- Take of a request that holds a fixed window, all or nothing over its
-- windows and buckets (bucket.lua is prepended): the same arithmetic as
-- admission/ratelimit's MemoryStore.TakeAll. Requests of buckets alone run
-- take.lua.
--
-- A window is a string of two little-endian doubles, struct.pack '<dd'
-- (tokens used, the window's end in µs), under a key of its own: the
-- bucket key of the same BucketKey and ':w', so a window's state and a
-- bucket's never meet, and the scripts that read buckets never see a
-- window. A missing key, or one of an earlier window (its end before the
-- take's), is a window with nothing used: the next window starts full. One
-- of a later window counts: a take decided late, after its window gave way
-- to the next, counts in the next. The key expires at the window's end (at
-- least 1 ms from now): nothing comes back before.
--
-- KEYS     per take, in order: a bucket's key; or a window's key followed
--          by the bucket key of the same BucketKey. All share the tenant's
--          hash tag, so on a cluster they share a slot.
-- ARGV[4i-3], ARGV[4i-2], ARGV[4i-1], ARGV[4i]
--          take i's window end (µs since the epoch, which Redis's clock
--          counts in; 0 for a bucket), rate (tokens per second, > 0; a
--          window's is nominal, unread), burst (tokens, > 0) and cost
--          (tokens, > 0)
--
-- Reply: {allowed (1 or 0), per take: a bucket's tokens (struct.pack '<d')
-- or a window's tokens left and end in µs ('<dd'), now (µs)}. Every take is
-- charged when each holds its cost (tokens after the take); otherwise none
-- is, nothing is written, and the tokens are those each holds now.
--
-- A window's first admission (its key missing or of an earlier window)
-- deletes the bucket of the same BucketKey: a limit changed from a bucket
-- to a window and back starts afresh, as in the embedded store. Only the
-- first, so that instances still deciding it as a bucket during a reload
-- find their bucket restarted full at most once a window, not at every
-- take of the others.

-- loadWindow returns the tokens used in the window ending at wend (µs)
-- by the state at key, the end the state has after a take (the later of
-- the two), and whether the window starts with this take.
local function loadWindow(key, wend)
  local state = redis.call('GET', key)
  if state then
    local used, last = struct.unpack('<dd', state)
    if last >= wend then
      return used, last, false
    end
  end
  return 0, wend, true
end

-- storeWindow writes used at key for the window ending at wend (µs), with
-- a TTL until then and a minute more, counted from Redis's clock at now:
-- in whole ms, and below the 1e17 from which Lua prints a number in
-- exponent form (PX wants an integer), as store's. The minute is for a
-- gateway whose clock is behind Redis's: its window is not over yet when
-- Redis's is, and a key gone at Redis's end would make each of its takes
-- a fresh window until its own clock got there.
local function storeWindow(key, used, wend, now)
  local ttl = math.min(math.max(math.ceil((wend - now) / 1000), 0) + 60000, 1e15)
  redis.call('SET', key, struct.pack('<dd', used, wend), 'PX', ttl)
end

local now = clock()
local n = #ARGV / 4
-- Per take: its key, tokens (a window's left), a bucket's last instant
-- and expiry or a window's used and end, and a window's bucket key and
-- start.
local keys, tokens, a, b, bucket, starts = {}, {}, {}, {}, {}, {}
local allowed = 1
local k = 1
for i = 1, n do
  local wend, rate, burst, cost = tonumber(ARGV[4 * i - 3]), tonumber(ARGV[4 * i - 2]), tonumber(ARGV[4 * i - 1]), tonumber(ARGV[4 * i])
  keys[i] = KEYS[k]
  if wend > 0 then
    a[i], b[i], starts[i] = loadWindow(KEYS[k], wend)
    tokens[i] = math.max(burst - a[i], 0)
    bucket[i] = KEYS[k + 1]
    k = k + 2
  else
    tokens[i], a[i], b[i] = load(KEYS[k], rate, burst, now)
    k = k + 1
  end
  if tokens[i] < cost then
    allowed = 0
  end
end

if allowed == 1 then
  for i = 1, n do
    local rate, burst, cost = tonumber(ARGV[4 * i - 2]), tonumber(ARGV[4 * i - 1]), tonumber(ARGV[4 * i])
    tokens[i] = tokens[i] - cost
    if bucket[i] then
      storeWindow(keys[i], a[i] + cost, b[i], now)
      if starts[i] then
        redis.call('DEL', bucket[i])
      end
    else
      store(keys[i], tokens[i], a[i], now, rate, burst, b[i])
    end
  end
end

local reply = {allowed}
for i = 1, n do
  if bucket[i] then
    reply[i + 1] = struct.pack('<dd', tokens[i], b[i])
  else
    reply[i + 1] = struct.pack('<d', tokens[i])
  end
end
reply[n + 2] = now
return reply
