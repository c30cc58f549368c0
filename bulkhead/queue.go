package bulkhead

import (
	"context"
	"math"
	"time"
)

// The queue side of Pools: requests that find no seat wait here, and
// freed seats go to them.

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
	if ps.fifo {
		return ""
	}
	return flow
}

// makeRoomLocked reports whether p's queue can take one more request of
// flow, pushing out the newest request of the longest flow if that flow is
// longer than flow would be.
func (ps *Pools) makeRoomLocked(p *pool, r *Request, now time.Time) bool {
	if p.queue.Len() < p.cfg.QueueLength {
		return true
	}
	if p.cfg.QueueLength == 0 {
		return false
	}
	longest, n := p.queue.longest()
	if p.queue.flowLen(ps.flowKey(r.flow()))+1 >= n {
		// Not shorter: only a tenant within its fair share may still
		// push out the newest request of a longest flow whose tenant
		// is above its own.
		last, _ := p.queue.newest(longest)
		ps.shareLevelLocked(p, ps.nanos(now))
		if !ps.withinLocked(p, r.Tenant, now) || ps.withinLocked(p, last.req.Tenant, now) {
			return false
		}
	}
	victim, _ := p.queue.popNewest(longest)
	ps.queued--
	ps.useLocked(p, &victim.req, -1)
	victim.evicted = true
	victim.ready <- struct{}{}
	return true
}

// wait blocks a queued request until it is granted, pushed out, timed out or
// cancelled.
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
		return ps.seatLocked(p, w.lender, w.req.Tenant, w.granted, w.granted.Sub(w.enqueued)), nil
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
// from idle pools. A pool with requests queued lends nothing, so a lender's
// seats come back to it as its borrowers release them.
func (ps *Pools) dispatchLocked() {
	if ps.queued == 0 {
		return
	}
	now := time.Now()
	for _, p := range ps.order {
		for p.queue.Len() > 0 && p.used < p.nominal && ps.grantLocked(p, p, now) {
		}
	}
	for progress := true; progress && ps.queued > 0; {
		progress = false
		for i := range ps.order {
			p := ps.order[(ps.rotor+i)%len(ps.order)]
			if p.queue.Len() == 0 {
				continue
			}
			if l := ps.lenderLocked(p); l != nil && ps.grantLocked(p, l, now) {
				progress = true
			}
		}
		ps.rotor = (ps.rotor + 1) % len(ps.order)
	}
}

// grantLocked hands a seat of lender to the next request in p's queue
// whose tenant is under its cap, and reports whether there was one. The
// tenants within their fair shares of the pool go first, the one using
// least for its weight before the others (then the fair queue's order
// among those): the queue's wait falls on the tenants above their shares,
// whose traffic builds it, and a light tenant's short requests are not
// kept in turn behind heavier tenants that happen to be within their
// shares too. A request of a tenant above its share takes no seat of the
// lender's headroom.
func (ps *Pools) grantLocked(p, lender *pool, now time.Time) bool {
	ps.shareLevelLocked(p, ps.nanos(now))
	var w *waiter
	ok := false
	if ps.fifo {
		w, ok = p.queue.PopFunc(ps.readyLocked)
	} else if least := ps.leastLocked(p, now); least != "" {
		w, ok = p.queue.PopFunc(func(w *waiter) bool { return w.req.Tenant == least && ps.readyLocked(w) })
	}
	if !ok && !ps.fifo {
		w, ok = p.queue.PopFunc(func(w *waiter) bool { return ps.readyLocked(w) && ps.withinLocked(p, w.req.Tenant, now) })
	}
	if !ok && !ps.fifo && ps.spareLocked(lender, now) {
		w, ok = p.queue.PopFunc(ps.readyLocked)
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

// leastLocked returns the tenant with requests queued in p, within its
// fair share, whose use for its weight is least; "" if none. ps.mu must
// be held.
func (ps *Pools) leastLocked(p *pool, now time.Time) string {
	t := ps.nanos(now)
	least, min := "", math.Inf(1)
	for id, u := range p.users {
		if u.present <= u.held.Level() {
			continue
		}
		if use := useOf(u, t); use <= p.level*u.weight && use/u.weight < min {
			least, min = id, use/u.weight
		}
	}
	return least
}

// readyLocked reports whether a queued request may take a seat now.
func (ps *Pools) readyLocked(w *waiter) bool { return ps.underCapLocked(&w.req) }
