-- The token bucket that take.lua and sync.lua share, prepended to each of
-- them (script.go): the same arithmetic as admission/ratelimit's
-- bucket.go, with time in microseconds from the Redis server's clock. A
-- bucket is a string of two little-endian doubles, struct.pack '<dd'
-- (tokens, last refill instant in µs); a missing key is a full bucket.

-- clock returns the Redis server's time in µs, so that every instance
-- shares one clock.
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- load returns the tokens the bucket at key holds at now (refilled since
-- its last instant, capped at burst; a clock that went backwards refills
-- nothing) and its last instant.
local function load(key, rate, burst, now)
  local tokens, last = burst, now
  local state = redis.call('GET', key)
  if state then
    tokens, last = struct.unpack('<dd', state)
  end
  local elapsed = now - last
  if elapsed <= 0 then
    tokens = math.min(tokens, burst)
  else
    tokens = math.min(burst, tokens + elapsed / 1e6 * rate)
  end
  return tokens, last
end

-- store writes tokens at now, or at last when the clock went back (last
-- never moves backwards, so a stepped clock cannot mint tokens), with a
-- TTL that ends when the bucket is full again (at least 1 ms), counted
-- from Redis's real clock: when it went backwards, the bucket is full
-- only (last - now) later.
local function store(key, tokens, last, now, rate, burst)
  last = math.max(now, last)
  local ttl = math.ceil((last - now) / 1000 + (burst - tokens) / rate * 1000)
  if ttl < 1 then
    ttl = 1
  end
  -- PX wants an integer; Lua prints 1e17 and above in exponent form.
  if ttl > 1e15 then
    ttl = 1e15
  end
  redis.call('SET', key, struct.pack('<dd', tokens, last), 'PX', ttl)
end

