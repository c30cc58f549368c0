-- The decayed rates that backstop.lua and backstopsync.lua share,
-- prepended to each (backstop.go, backstopsync.go): internal/fairshare's
-- Rate, with time in µs.

-- decayed returns a rate v measured at µs at, decayed to now with time
-- constant tau seconds (a rate from the future is not decayed).
local function decayed(v, at, now, tau)
  if now <= at then
    return v
  end
  return v * math.exp(-(now - at) / 1e6 / tau)
end
