-- Peek at buckets and fixed windows of one tenant without charging them
-- (bucket.lua is prepended): what each holds now on Redis's clock, read
-- as take.lua and window.lua read it. It writes nothing: a missing key
-- stays missing, and no TTL moves.
--
-- KEYS     per take, in order: a bucket's key, or a window's (the bucket
--          key and ':w', see window.lua). All share the tenant's hash tag.
-- ARGV[3i-2], ARGV[3i-1], ARGV[3i]
--          take i's window end (µs since the epoch; 0 for a bucket), rate
--          (tokens per second, > 0) and burst (tokens, > 0)
--
-- Reply: {per take: a bucket's tokens (struct.pack '<d') or a window's
-- tokens left and end in µs ('<dd'), now (µs)}. A window's state of an
-- earlier window counts nothing used, and its end is then the take's; one
-- of a later window counts, as window.lua counts it.

local now = clock()
local reply = {}
for i = 1, #KEYS do
  local wend, rate, burst = tonumber(ARGV[3 * i - 2]), tonumber(ARGV[3 * i - 1]), tonumber(ARGV[3 * i])
  if wend > 0 then
    local used, last = 0, wend
    local state = redis.call('GET', KEYS[i])
    if state then
      local u, e = struct.unpack('<dd', state)
      if e >= wend then
        used, last = u, e
      end
    end
    reply[i] = struct.pack('<dd', math.max(burst - used, 0), last)
  else
    reply[i] = struct.pack('<d', (load(KEYS[i], rate, burst, now)))
  end
end
reply[#KEYS + 1] = now
return reply
