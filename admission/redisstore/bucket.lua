-- The token bucket that take.lua, sync.lua and relimit.lua share,
-- prepended to each of them (script.go): the same arithmetic as
-- admission/ratelimit's bucket.go, with time in microseconds from the
-- Redis server's clock. A bucket is a string of three little-endian
-- doubles, struct.pack '<ddd' (tokens, last refill instant in µs, and the
-- instant in µs at which the key expires); a missing key is a full bucket.
-- A 16-byte '<dd' value (written before the expiry was kept) reads as
-- expiring at 0, and a script that expects '<dd' reads the first two of
-- '<ddd': instances of both versions can share a Redis while a fleet
-- is upgraded.

-- clock returns the Redis server's time in µs, so that every instance
-- shares one clock.
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- load returns the tokens the bucket at key holds at now (refilled since
-- its last instant, capped at burst; a clock that went backwards refills
-- nothing), its last instant and the instant its key expires.
local function load(key, rate, burst, now)
  local tokens, last, expires = burst, now, 0
  local state = redis.call('GET', key)
  if state then
    if #state >= 24 then
      tokens, last, expires = struct.unpack('<ddd', state)
    else
      tokens, last = struct.unpack('<dd', state)
    end
  end
  local elapsed = now - last
  if elapsed <= 0 then
    tokens = math.min(tokens, burst)
  else
    tokens = math.min(burst, tokens + elapsed / 1e6 * rate)
  end
  return tokens, last, expires
end

-- store writes tokens at now, or at last when the clock went back (last
-- never moves backwards, so a stepped clock cannot mint tokens), with a
-- TTL that ends when the bucket is full again (at least 1 ms), counted
-- from Redis's real clock: when it went backwards, the bucket is full
-- only (last - now) later.
--
-- The expiry never moves earlier (expires is the key's current one): a
-- key is full at the rate of the call, but a reload may have lowered the
-- rate, and relimit.lua has then set the expiry at which it is full under
-- the lower one. A take still in flight under the old limit must not bring
-- that back, or the key would vanish early and come back full. Under one
-- limit each take's full instant is the latest anyway.
local function store(key, tokens, last, now, rate, burst, expires)
  last = math.max(now, last)
  local ttl = math.ceil(math.max((last - now) / 1000 + (burst - tokens) / rate * 1000, (expires - now) / 1000))
  if ttl < 1 then
    ttl = 1
  end
  -- PX wants an integer; Lua prints 1e17 and above in exponent form.
  if ttl > 1e15 then
    ttl = 1e15
  end
  redis.call('SET', key, struct.pack('<ddd', tokens, last, now + ttl * 1000), 'PX', ttl)
end
