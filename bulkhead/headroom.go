package bulkhead

import "math"

// lighterSet is what a pool's tenants lighter than a given one use and
// hold, and the seats an equal division by weight would give them.
type lighterSet struct {
	use      float64 // their use, in seats
	held     int     // the seats they hold
	entitled float64 // the pool's seats × their weights ÷ the weights of all its tenants
}

// lighterUse is the lighterSet at t of p's tenants using less than half
// as much (for their weights) as a tenant whose use for its weight is
// ratio.
func lighterUse(p *pool, ratio float64, t int64) lighterSet {
	var l lighterSet
	var w, all float64
	for _, u := range p.users {
		all += u.weight
		if x := p.set.useOf(u, t); x/u.weight < ratio/lighter {
			l.use += x
			l.held += u.held.Level()
			w += u.weight
		}
	}
	if all > 0 {
		l.entitled = float64(p.nominal) * w / all
	}
	return l
}

// burstNeed is how many seats the lighter tenants' requests need when
// one of them arrives, nearly all the time: burstNeedAt(l, 2).
func (ps *Pools) burstNeed(l lighterSet) int { return ps.burstNeedAt(l, 2) }

// burstNeedAt is how many seats the requests of tenants using use seats,
// arriving at random, need when one of them arrives: use + sd√use rounded
// up, the number busy nearly all the time (the number busy is about
// Poisson), and one more for the arriving request (ruleArrivalSeat). The
// busy count alone is not enough: an arrival finds another of its
// tenants' requests busy about use of the time (a tenant at 0.09 seats,
// 9% of its requests), and with only the busy seats kept those requests
// find none and wait for a heavier tenant's long request to end — one in
// eleven of a light tenant's reads, far into its p99. The arrival's seat
// is kept only within the seats an equal division by weight gives the
// lighter tenants (l.entitled): a light tenant of a small pool does not
// take most of it from a heavier one that shares it.
func (ps *Pools) burstNeedAt(l lighterSet, sd float64) int {
	n := int(math.Ceil(l.use + sd*math.Sqrt(l.use) - 1e-9))
	if l.use > 0 && ps.on(ruleArrivalSeat) && float64(n+1) <= l.entitled+1e-9 {
		n++
	}
	return n
}

// globalBurstSD is how far above their use the headroom over all pools
// reaches for the lighter tenants' bursts, in standard deviations: 3, not
// burstNeed's 2. It serves the light tenants of every pool, whose bursts
// outgrow their small pools' own headroom and borrow, and a request that
// finds it all taken waits for a heavy tenant's long one to end: at 2√U
// about 2% of their requests do, at 3√U about 0.2% — with a hundred
// tenants each judged by the p99 of its own few dozen requests, 2% puts
// a wait into many of them.
const globalBurstSD = 3
