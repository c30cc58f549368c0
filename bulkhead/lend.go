package bulkhead

import "time"

// Whose seat a request takes: its own pool's, or one borrowed from an idle
// pool, and only beyond the headroom the lender keeps for its lighter
// tenants.

// lenderLocked returns the pool whose seat a queued request of p may take
// now: p itself if it has a free seat, else the idle pool with the most
// seats to lend if p may borrow, else nil. Whose request takes it is
// grantLocked's to say.
func (ps *Pools) lenderLocked(p *pool) *pool {
	return ps.lenderWithLocked(p, -1, 0)
}

// lenderForLocked is lenderLocked for request r arriving at now: unless r
// is critical, only seats beyond the lender's headroom for its tenant
// and of p's own (roomLocked).
func (ps *Pools) lenderForLocked(p *pool, r *Request, now time.Time) *pool {
	if r.Critical {
		return ps.lenderLocked(p)
	}
	t := ps.nanos(now)
	ps.shareLevelLocked(p, t)
	return ps.lenderWithLocked(p, ps.ratioLocked(p, r.Tenant, t), t)
}

// lenderWithLocked is lenderLocked with seats a tenant of ratio may take at
// t; a negative ratio takes any.
func (ps *Pools) lenderWithLocked(p *pool, ratio float64, t int64) *pool {
	room := func(l *pool) bool { return ratio < 0 || ps.lenderKeepsLocked(l, ratio, t) }
	if p.used < p.nominal && room(p) {
		return p
	}
	if p.borrowed >= p.borrowLimit || ratio >= 0 && !ps.mayBorrowLocked(p, ratio, t) {
		return nil
	}
	var best *pool
	bestFree := 0
	for _, l := range ps.order {
		if l == p || l.queue.Len() > 0 || !room(l) {
			continue
		}
		if free := min(l.nominal-l.used, l.lendable-l.lent); free > bestFree {
			best, bestFree = l, free
		}
	}
	return best
}
