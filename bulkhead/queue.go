package bulkhead

import (
	"context"
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
	now := time.Now()
	for _, p := range ps.order {
		for {
			w, ok := p.queue.Pop()
			if !ok {
				break
			}
			ps.queued--
			ps.useLocked(p, &w.req, now, -1)
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
	ps.useLocked(p, &victim.req, time.Now(), -1)
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
			ps.useLocked(p, &w.req, time.Now(), -1)
			ps.releaseLocked(p, w.lender, w.req.Tenant)
			return Seat{}, cerr
		}
		return ps.seatLocked(p, w.lender, w.req.Tenant, w.granted, w.granted.Sub(w.enqueued)), nil
	}
	p.queue.Remove(w.handle)
	ps.queued--
	ps.useLocked(p, &w.req, time.Now(), -1)
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
// whose tenant is under its cap, and reports whether there was one. A
// request of a tenant within its fair share of the pool goes first (in
// the fair queue's order among those): the queue's wait falls on the
// tenants above their shares, whose traffic builds it.
func (ps *Pools) grantLocked(p, lender *pool, now time.Time) bool {
	ps.shareLevelLocked(p, ps.nanos(now))
	w, ok := p.queue.PopFunc(func(w *waiter) bool { return ps.readyLocked(w) && ps.withinLocked(p, w.req.Tenant, now) })
	if !ok {
		w, ok = p.queue.PopFunc(ps.readyLocked)
	}
	if !ok {
		return false
	}
	ps.queued--
	ps.takeLocked(p, lender, w.req.Tenant)
	w.granted, w.lender = now, lender
	w.ready <- struct{}{}
	return true
}

// readyLocked reports whether a queued request may take a seat now.
func (ps *Pools) readyLocked(w *waiter) bool { return ps.underCapLocked(&w.req) }
