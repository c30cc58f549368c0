package bulkhead

import (
	"slices"
	"time"
)

// longLike: a request is long when its cost's mean hold is at least this
// many times the shortest cost's.
const longLike = 8

// maxCosts bounds the costs whose hold the pools learn; the costs are the
// routes' prices, a handful in any config.
const maxCosts = 64

// costHold is one class's mean hold (Request.Class, or its cost). A few
// classes are searched faster in a slice than in a map, on every acquire
// and release.
type costHold struct {
	class holdClass
	hold  time.Duration
}

// holdIndex returns the index of c's mean hold in ps.holds, or -1 if it
// is not learnt. ps.mu must be held.
func (ps *Pools) holdIndex(c holdClass) int {
	return slices.IndexFunc(ps.holds, func(h costHold) bool { return h.class.key == c.key })
}

// learnHoldLocked teaches c's mean hold a seat held for hold. ps.mu must
// be held.
func (ps *Pools) learnHoldLocked(c holdClass, hold time.Duration) {
	i := ps.holdIndex(c)
	switch {
	case i >= 0:
		ps.holds[i].hold += (hold - ps.holds[i].hold) / 8
	case len(ps.holds) < maxCosts:
		ps.holds = append(ps.holds, costHold{c, max(hold, 1)})
	default:
		return
	}
	ps.shortestHold, ps.shortestCost = ps.holds[0].hold, ps.holds[0].class.cost
	for _, h := range ps.holds[1:] {
		if h.hold < ps.shortestHold {
			ps.shortestHold, ps.shortestCost = h.hold, h.class.cost
		}
	}
}

// longLocked reports whether a request of class c is long: it holds a
// seat longLike times as long as the shortest class's. ps.mu must be held.
//
// The headroom is kept for the short requests of lighter tenants: a 5 ms
// read must not wait for a 300 ms export to end. A light tenant's long
// request taking a seat of it would be just that export: a tenant seen
// for the first time is the lightest of all, and at a flood's onset the
// floods' first exports, each its tenant's only request so far, took the
// seats kept for everyone else's reads for as long as an export takes. So
// a long request counts, for the headroom, as a tenant using heavyUse at
// least (headroomRatio): it keeps the seats the tenants lighter than that
// need; and a tenant holding a long request's seat uses heavyUse at
// least, whatever its averages say yet, so its seat is not counted as
// headroom the lighter tenants hold.
//
// The pools learn each cost's mean hold as seats are released
// (learnHoldLocked). Until a cost's is known, it is taken to be the
// shortest cost's scaled by the two costs (holdOf; a route's cost is its
// price, which an operator sets by what it takes): at a cold start the
// first exports are those of the floods.
func (ps *Pools) longLocked(c holdClass) bool {
	if !ps.on(ruleLongIsHeavy) || ps.shortestCost == 0 {
		return false
	}
	return ps.holdOf(c) >= longLike*ps.shortestHold
}

// holdOf is c's mean hold of a seat: learnt, or else the shortest class's
// scaled by the two costs; zero before any is learnt. ps.mu must be held.
func (ps *Pools) holdOf(c holdClass) time.Duration {
	if i := ps.holdIndex(c); i >= 0 {
		return ps.holds[i].hold
	}
	if ps.shortestCost == 0 {
		return 0
	}
	return ps.shortestHold * time.Duration(c.cost) / time.Duration(ps.shortestCost)
}

// headroomRatio is ratio, the use for its weight of the tenant of a
// non-critical request of class c, or heavyUse if that is more and the
// request is long. ps.mu must be held.
func (ps *Pools) headroomRatio(ratio float64, c holdClass) float64 {
	if ps.longLocked(c) {
		return max(ratio, heavyUse)
	}
	return ratio
}
