package bulkhead

import "time"

// lightUse is the most use (for its weight) of a light tenant: one using
// less than a tenth of a seat, a few short requests a second. A light
// tenant's requests are no flood, and it is the tenant the headroom is
// for: it may borrow beyond its pool's borrowing limit, and from a pool
// whose queue is not empty (lightLocked). Below heavyUse, so that a light
// tenant keeps no headroom back either.
const lightUse = 0.1

// lightLocked reports whether a tenant whose use of its pool for its
// weight is ratio is light (lightUse). A negative ratio, which asks for
// any tenant, is not. ps.mu must be held.
func (ps *Pools) lightLocked(ratio float64) bool {
	return ratio >= 0 && ratio < lightUse && ps.on(ruleLightBorrows)
}

// modestUse is the most use (for its weight) of a tenant whose short
// requests may borrow beyond its pool's borrowing limit, from an idle pool
// (ruleModestBorrows): half a seat, far below the share of any pool that
// two tenants or more use. The borrowing limit is there to keep a flood of
// one pool from taking the others' seats; a tenant using under half a
// seat is no flood, and its short requests hold a borrowed seat briefly,
// while the seats its own pool has are held by a heavier neighbour.
const modestUse = 0.5

// pastLimitLocked reports whether a request whose tenant uses ratio for its
// weight, and whose route holds seats long or not, may borrow beyond its
// pool's borrowing limit: a light tenant's (lightLocked), or a short
// request of a tenant using less than modestUse (ruleModestBorrows).
// ps.mu must be held.
func (ps *Pools) pastLimitLocked(ratio float64, long bool) bool {
	return ps.lightLocked(ratio) || !long && ratio >= 0 && ratio < modestUse && ps.on(ruleModestBorrows)
}

// lightAtOnce is the most requests a light tenant has in a pool at once
// (holding seats or queued): more is no light use, whatever its average
// says. Two, not one: a tenant sending a few short requests a second at
// random has two in the pool now and then (a 20 ms read at 1 a second:
// one read in fifty finds the one before it still there), and that
// second read is no flood; three at once is rarer by about as much again
// (for a use of U seats, about U/3 as often as two).
const lightAtOnce = 2

// notLightIfBusy returns ratio, the use for its weight of u's tenant, or
// lightUse if that is more and the tenant has more than lightAtOnce
// requests in the pool with this one, of which mine are already counted
// in u.present. At a flood's start, before its average has caught up, a
// tenant then takes lightAtOnce seats as a light tenant, not every seat it
// can borrow.
func (ps *Pools) notLightIfBusy(u *poolUser, ratio float64, mine int) float64 {
	most := lightAtOnce
	if !ps.on(ruleLightInPairs) {
		most = 1
	}
	if u.present-mine+1 > most {
		return max(ratio, lightUse)
	}
	return ratio
}

// lenderLocked returns the pool whose seat a request of p may take now
// regardless of headroom (a critical request): p itself if it has a free
// seat, else the idle pool with the most seats to lend if p may borrow,
// else nil.
func (ps *Pools) lenderLocked(p *pool) *pool {
	if p.used < p.nominal {
		return p
	}
	return ps.borrowFromLocked(p, -1, 0, false)
}

// lenderForLocked returns whose seat request r of p, arriving at now,
// takes: one of p's own or one borrowed from another pool, as
// lenderLocked, or nil. Unless r is critical, only a seat beyond the
// headroom kept for lighter tenants: the lender's and p's own for their
// lighter tenants (roomLocked), and the pools' together for the lighter
// tenants of all (globalKeepsLocked). It takes p's own seat beyond p's seats when r's
// tenant is owed it (guaranteedLocked). A light tenant borrows where
// lenderLocked would not (borrowFromLocked).
func (ps *Pools) lenderForLocked(p *pool, r *Request, now time.Time) *pool {
	t := ps.nanos(now)
	ps.shareLevelLocked(p, t)
	ratio := ps.ratioLocked(p, r.Tenant, t)
	if u := p.users[r.Tenant]; u != nil {
		ratio = ps.notLightIfBusy(u, ratio, 0)
	}
	if !r.Critical {
		ratio = ps.headroomRatio(ratio, r.holdClass())
	}
	if ps.guaranteedLocked(p, ratio, t) {
		return p
	}
	if r.Critical {
		if l := ps.lenderLocked(p); l != nil || !ps.lightLocked(ratio) {
			return l
		}
		return ps.borrowFromLocked(p, ratio, t, false)
	}
	if !ps.globalKeepsLocked(ratio, t) {
		return nil
	}
	if p.used < p.nominal && ps.lenderKeepsLocked(p, p, ratio, t) {
		return p
	}
	past := ps.pastLimitLocked(ratio, ps.longLocked(r.holdClass()))
	if !ps.mayBorrowLocked(p, ratio, t, past) {
		return nil
	}
	return ps.borrowFromLocked(p, ratio, t, past)
}

// borrowFromLocked returns the pool with the most seats p may borrow,
// beyond the headroom each keeps for its tenants lighter than ratio at t
// (a negative ratio takes any), or nil; beyond p's borrowing limit when
// past (pastLimitLocked), from a pool none of whose own requests is in
// flight or queued (unused). It does not look at p's own free
// seats: a seat p keeps as headroom for its lighter tenants is no reason
// for a heavier one to wait while another pool sits idle.
//
// Only an idle pool (nothing queued) lends, within p's borrowing limit —
// except to a light tenant, which may borrow beyond the limit and from a
// pool with a queue. A queue beside a free seat means that its requests
// may not take the seat (it is headroom kept for lighter tenants, or their
// tenants are at their caps: the dispatch would have granted it
// otherwise), and a light tenant is what headroom is for.
func (ps *Pools) borrowFromLocked(p *pool, ratio float64, t int64, past bool) *pool {
	light := ps.lightLocked(ratio)
	pastLimit := p.borrowed >= p.borrowLimit && !light
	if pastLimit && !past {
		return nil
	}
	var best *pool
	bestFree := 0
	for _, l := range ps.order {
		if l == p || l.queue.Len() > 0 && !light || ratio >= 0 && !ps.lenderKeepsLocked(l, p, ratio, t) || pastLimit && !unused(l) {
			continue
		}
		if free := lendable(l); free > bestFree {
			best, bestFree = l, free
		}
	}
	return best
}

// unused reports whether none of l's own requests is in flight or queued:
// the only lender a request borrowing past its pool's borrowing limit for
// a modest tenant (pastLimitLocked) may take a seat of, so that its
// borrowing never takes a seat a tenant of the lender's may reach for.
// Pools.mu must be held.
func unused(l *pool) bool { return l.used == l.lent && l.borrowed == 0 && l.queue.Len() == 0 }

// lendable is how many seats l may lend now: free seats within its
// lendable share. Pools.mu must be held.
func lendable(l *pool) int { return min(l.nominal-l.used, l.lendable-l.lent) }
