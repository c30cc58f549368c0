package bulkhead

import "time"

// Whose seat a request takes: its own pool's, or one borrowed from an idle
// pool, and only beyond the headroom the lender keeps for its lighter
// tenants.

// lenderLocked returns the pool whose seat a request of p may take now
// regardless of headroom (a critical request): p itself if it has a free
// seat, else the idle pool with the most seats to lend if p may borrow,
// else nil.
func (ps *Pools) lenderLocked(p *pool) *pool {
	if p.used < p.nominal {
		return p
	}
	return ps.borrowFromLocked(p, -1, 0)
}

// lenderForLocked is lenderLocked for request r arriving at now: unless r
// is critical, only seats beyond the lender's headroom for its tenant
// and of p's own (roomLocked); and p's own seat beyond p's seats when r's
// tenant is owed it (guaranteedLocked).
func (ps *Pools) lenderForLocked(p *pool, r *Request, now time.Time) *pool {
	t := ps.nanos(now)
	ps.shareLevelLocked(p, t)
	ratio := ps.ratioLocked(p, r.Tenant, t)
	if ps.guaranteedLocked(p, ratio, t) {
		return p
	}
	if r.Critical {
		return ps.lenderLocked(p)
	}
	if p.used < p.nominal && ps.lenderKeepsLocked(p, ratio, t) {
		return p
	}
	if !ps.mayBorrowLocked(p, ratio, t) {
		return nil
	}
	return ps.borrowFromLocked(p, ratio, t)
}

// borrowFromLocked returns the idle pool with the most seats p may borrow,
// beyond the headroom each keeps for its tenants lighter than ratio at t
// (a negative ratio takes any), or nil. It does not look at p's own free
// seats: a seat p keeps as headroom for its lighter tenants is no reason
// for a heavier one to wait while another pool sits idle.
func (ps *Pools) borrowFromLocked(p *pool, ratio float64, t int64) *pool {
	if p.borrowed >= p.borrowLimit {
		return nil
	}
	var best *pool
	bestFree := 0
	for _, l := range ps.order {
		if l == p || l.queue.Len() > 0 || ratio >= 0 && !ps.lenderKeepsLocked(l, ratio, t) {
			continue
		}
		if free := min(l.nominal-l.used, l.lendable-l.lent); free > bestFree {
			best, bestFree = l, free
		}
	}
	return best
}
