-- The decayed rates and fair shares that backstop.lua, backstopsync.lua
-- and backstopsettle.lua share, prepended to each (backstop.go,
-- backstopsync.go): internal/fairshare's Rate and ShareFor, with time in
-- µs.

-- decayed returns a rate v measured at µs at, decayed to now with time
-- constant tau seconds (a rate from the future is not decayed).
local function decayed(v, at, now, tau)
  if now <= at then
    return v
  end
  return v * math.exp(-(now - at) / 1e6 / tau)
end

-- shareFor is a tenant's fair share of weight at the level (-1: nobody
-- above share, an even split of shareOf × rate over weights), as
-- internal/fairshare's ShareFor.
local function shareFor(level, weights, weight, rate, shareOf)
  if level < 0 then
    return shareOf * rate * weight / math.max(weights, weight)
  end
  return level * weight
end
