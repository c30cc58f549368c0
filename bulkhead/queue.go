package bulkhead

import (
	"cmp"
	"context"
	"slices"
	"time"
)

// Drain is for graceful shutdown: every request waiting in a queue fails at
// once with ErrDraining, and from now on a request that finds no free seat
// fails with ErrDraining instead of queueing. Requests holding seats keep
// them, and free seats are still handed out. Drain cannot be undone.
func (ps *Pools) Drain() {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.draining = true
	for _, p := range ps.order {
		for {
			w, ok := p.queue.Pop()
			if !ok {
				break
			}
			ps.queued--
			ps.useLocked(p, &w.req, -1)
			w.drained = true
			w.ready <- struct{}{}
		}
	}
}

func (ps *Pools) flowKey(flow string) string {
	if !ps.on(ruleFairQueue) {
		return ""
	}
	return flow
}

// makeRoomLocked reports whether p's queue can take one more request r,
// pushing out another if it must: the newest request of the longest flow
// if that flow is longer than r's would be; else, for a tenant within its
// fair share, the newest of a longest flow whose tenant is above its own;
// else the newest request of r's own tenant of a lower priority than r's
// (a tenant's critical read does not find the queue full of its own
// exports).
func (ps *Pools) makeRoomLocked(p *pool, r *Request, now time.Time) bool {
	if p.queue.Len() < p.cfg.QueueLength {
		return true
	}
	if p.cfg.QueueLength == 0 {
		return false
	}
	longest, n := p.queue.longest()
	victimFlow := longest
	if p.queue.flowLen(ps.flowKey(r.flow()))+1 >= n {
		// As long as the longest once queued: only a tenant within its
		// share pushes out, and only a request of one above it, the
		// heaviest of those the longest flows hold.
		ps.shareLevelLocked(p, ps.nanos(now))
		victimFlow = ""
		switch {
		case !ps.withinLocked(p, r.Tenant, now):
		case !ps.on(ruleHeaviestOfLongest):
			if last, _ := p.queue.newest(longest); !ps.withinLocked(p, last.req.Tenant, now) {
				victimFlow = longest
			}
		default:
			victimFlow = ps.heaviestLongestLocked(p, n, now)
		}
		if victimFlow == "" {
			if victimFlow = ps.lowerOwnLocked(p, r); victimFlow == "" {
				return false
			}
		}
	}
	victim, _ := p.queue.popNewest(victimFlow)
	ps.queued--
	ps.useLocked(p, &victim.req, -1)
	victim.evicted = true
	victim.ready <- struct{}{}
	return true
}

// heaviestLongestLocked returns, of p's flows holding n requests, the one
// whose newest request's tenant uses most of p above its fair share; "" if
// every such tenant is within its share. ps.mu must be held.
func (ps *Pools) heaviestLongestLocked(p *pool, n int, now time.Time) string {
	best, most, t := "", 0.0, ps.nanos(now)
	for key, fi := range p.queue.byKey {
		f := &p.queue.flows[fi]
		if f.n != n {
			continue
		}
		tenant := p.queue.nodes[f.tail].item.req.Tenant
		if ps.withinLocked(p, tenant, now) {
			continue
		}
		if r := ps.ratioLocked(p, tenant, t); best == "" || r > most {
			best, most = key, r
		}
	}
	return best
}

// lowerOwnLocked returns the flow of r's tenant whose newest request has
// the lowest priority below r's, the longest of those; "" if none. ps.mu
// must be held.
func (ps *Pools) lowerOwnLocked(p *pool, r *Request) string {
	best, prio, n := "", r.Priority, 0
	for key, fi := range p.queue.byKey {
		f := &p.queue.flows[fi]
		w := p.queue.nodes[f.tail].item
		if w.req.Tenant != r.Tenant {
			continue
		}
		if w.req.Priority < prio || w.req.Priority == prio && best != "" && f.n > n {
			best, prio, n = key, w.req.Priority, f.n
		}
	}
	return best
}

// wait is the queue side of Pools: it blocks a request that found no
// seat, queued in p, until a freed seat is granted to it (dispatchLocked)
// or it is pushed out, timed out or cancelled.
func (ps *Pools) wait(ctx context.Context, p *pool, w *waiter) (Seat, error) {
	timer := time.NewTimer(p.cfg.MaxWait)
	var err error
	select {
	case <-w.ready:
	case <-timer.C:
		err = ErrWaitTimeout
	case <-ctx.Done():
	}
	timer.Stop()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	switch {
	case w.evicted:
		return Seat{}, ErrQueueFull
	case w.drained:
		return Seat{}, ErrDraining
	case !w.granted.IsZero():
		if cerr := ctx.Err(); cerr != nil {
			// Granted as the caller gave up: never served, the seat
			// goes to the next in line.
			ps.heldLocked(p, w.req.Tenant, time.Now(), -1, 0)
			ps.releaseLocked(p, w.lender, w.req.Tenant)
			return Seat{}, cerr
		}
		return ps.seatLocked(p, w.lender, &w.req, w.granted, w.granted.Sub(w.enqueued)), nil
	}
	p.queue.Remove(w.handle)
	ps.queued--
	ps.useLocked(p, &w.req, -1)
	if err == nil {
		err = ctx.Err()
	}
	return Seat{}, err
}

// dispatchLocked hands free seats to queued requests: first each pool's own
// seats to its own queue, then, round robin across pools, seats borrowed
// from idle pools, also to a pool whose own free seats are its headroom
// for lighter tenants than the ones queued. A pool with requests queued
// lends nothing, so a lender's seats come back to it as its borrowers
// release them.
func (ps *Pools) dispatchLocked() {
	if ps.queued == 0 {
		return
	}
	now := time.Now()
	for _, p := range ps.order {
		for p.queue.Len() > 0 && p.used < p.nominal && ps.grantLocked(p, p, now, grantRoom) {
		}
		for ps.on(ruleFairQueue) && p.queue.Len() > 0 && ps.mayOweLocked(p, ps.nanos(now)) && ps.grantLocked(p, p, now, grantOwed) {
		}
	}
	for progress := true; progress && ps.queued > 0; {
		progress = false
		for i := range ps.order {
			p := ps.order[(ps.rotor+i)%len(ps.order)]
			if p.queue.Len() == 0 {
				continue
			}
			l := ps.borrowFromLocked(p, -1, 0, false)
			if !ps.on(ruleBorrowPastHeadroom) {
				l = ps.lenderLocked(p)
			}
			if l != nil && ps.grantLocked(p, l, now, grantRoom) {
				progress = true
			} else if l := ps.borrowFromLocked(p, 0, ps.nanos(now), false); l != nil && ps.on(ruleFairQueue) && ps.grantLocked(p, l, now, grantLight) {
				// Ratio 0 asks for a lender to a light tenant (queued
				// or not, beyond p's borrowing limit); grantLight
				// hands its seat to p's light tenants only.
				progress = true
			} else if ps.on(ruleModestBorrows) && ps.on(ruleFairQueue) {
				// An unused lender beyond p's borrowing limit, for a
				// short request of a tenant using less than
				// modestUse (pastLimitLocked).
				if l := ps.borrowFromLocked(p, lightUse, ps.nanos(now), true); l != nil && ps.grantLocked(p, l, now, grantModest) {
					progress = true
				}
			}
		}
		ps.rotor = (ps.rotor + 1) % len(ps.order)
	}
}

// grantKind says which queued requests a grant may hand a seat to.
type grantKind int

const (
	// grantRoom: a seat of the lender, to a request whose tenant has room
	// beyond the headroom (roomLocked), or a critical one.
	grantRoom grantKind = iota
	// grantOwed: a seat of p beyond its seats, to a tenant owed one
	// (guaranteedLocked).
	grantOwed
	// grantLight: a seat of a lender with a queue or beyond p's borrowing
	// limit, to a light tenant (borrowFromLocked) with room.
	grantLight
	// grantModest: a seat of an idle lender beyond p's borrowing limit, to
	// a short request of a tenant using less than modestUse, with room
	// (modestRoomLocked).
	grantModest
)

// grantLocked hands a seat of lender to the next request in p's queue
// whose tenant is under its cap, and reports whether there was one. The
// tenants within their fair shares of the pool go first, from the
// lightest (least use of the pool for its weight): a light tenant's short
// requests never wait in turn behind heavier tenants. The tenants above
// their shares come after, those with the highest-priority request queued
// first (no tenant's critical read waits behind another's export), then
// the lightest. Each tenant's own requests go by priority, oldest first;
// without ruleFairQueue the queue is one flow, popped in order. A tenant
// takes no seat of the headroom the lender and p keep for the tenants
// lighter than it (roomLocked), except for a critical request. How a tenant may take the seat is kind's.
func (ps *Pools) grantLocked(p, lender *pool, now time.Time, kind grantKind) bool {
	var w *waiter
	ok := false
	if !ps.on(ruleFairQueue) {
		w, ok = p.queue.PopFunc(ps.readyLocked)
	} else {
		t := ps.nanos(now)
		ps.shareLevelLocked(p, t)
		waiting := p.waiting[:0]
		for _, u := range p.users {
			u.top, u.queued = 0, false
		}
		p.queue.PopFunc(func(w *waiter) bool { // looks at every flow's next request, pops none
			u := p.users[w.req.Tenant]
			if !u.queued || w.req.Priority > u.top {
				u.top, u.critical, u.topFlow, u.topClass = w.req.Priority, w.req.Critical, ps.flowKey(w.req.flow()), w.req.holdClass()
			}
			if !u.queued {
				u.queued, u.ratio = true, ps.notLightIfBusy(u, ps.useOf(u, t)/u.weight, 1)
				u.topReady = ps.readyLocked(w)
				waiting = append(waiting, u)
			}
			return false
		})
		for _, u := range waiting {
			if !u.critical {
				u.ratio = ps.headroomRatio(u.ratio, u.topClass)
			}
		}
		slices.SortFunc(waiting, func(a, b *poolUser) int {
			aa, ba := a.ratio > p.level, b.ratio > p.level
			switch {
			case aa != ba && aa:
				return 1
			case aa != ba:
				return -1
			case aa && a.top != b.top:
				return cmp.Compare(b.top, a.top)
			case a.ratio != b.ratio:
				return cmp.Compare(a.ratio, b.ratio)
			}
			return cmp.Compare(a.granted, b.granted) // equals: the one served longest ago
		})
		for _, u := range waiting {
			switch {
			case !u.topReady:
				continue
			case kind == grantOwed:
				if !ps.guaranteedLocked(p, u.ratio, t) {
					continue
				}
			case kind == grantLight && !ps.lightLocked(u.ratio):
				continue
			case kind == grantModest:
				if !ps.modestRoomLocked(p, lender, u.ratio, u.topClass, t) {
					continue
				}
			case !u.critical && !ps.roomLocked(p, lender, u.ratio, t):
				continue
			}
			if w, ok = p.queue.popOldest(u.topFlow); ok {
				ps.grants++
				u.granted = ps.grants
				break
			}
		}
		clear(waiting)
		p.waiting = waiting[:0]
	}
	if !ok {
		return false
	}
	ps.queued--
	ps.takeLocked(p, lender, w.req.Tenant, now)
	w.granted, w.lender = now, lender
	w.ready <- struct{}{}
	return true
}

// readyLocked reports whether a queued request may take a seat now.
func (ps *Pools) readyLocked(w *waiter) bool { return ps.underCapLocked(&w.req) }
