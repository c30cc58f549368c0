package admission

import (
	"context"
	"errors"
	"time"

	"github.com/fairgate/fairgate/bulkhead"
	"github.com/fairgate/fairgate/shed"
)

// admitBulkhead runs the bulkhead layer: a seat in the request's pool,
// waiting in the pool's fair queue when none is free. In a pool's fair
// queue a flow is a tenant's requests of one criticality, so a tenant's
// critical reads are not stuck behind its own queued exports. Without
// pools it does nothing. The error is the context's, when the client went
// away while queued.
func (g *Gate) admitBulkhead(ctx context.Context, c *compiled, d *Decision) error {
	if g.pools == nil {
		return nil
	}
	t, r, pool := d.Tenant, d.Route, d.pool()
	sp := g.layerSpan(ctx, SpanBulkhead)
	defer sp.end(d, LayerBulkhead)
	flow := t.ID
	if f := c.flows[t]; f != nil && int(r.Criticality) < len(f) {
		flow = f[r.Criticality]
	}
	start := g.now()
	seat, err := g.pools.Acquire(ctx, pool, bulkhead.Request{Tenant: t.ID, Flow: flow, Cost: int(d.cost()), Class: r.class, Weight: t.Weight, Cap: g.capFor(d), Priority: int(d.Priority), Critical: r.Criticality == shed.Critical, Arrived: d.arrived})
	if sp.on() {
		// A request that got no seat has no Seat to ask: its wait is
		// what it spent in Acquire (a wait_timeout waited max_wait).
		waited := seat.Waited()
		if err != nil {
			waited = g.now().Sub(start)
		}
		sp.s.SetAttributes(attrPool.String(pool), attrQueueWait.Float64(millis(waited)), attrBorrowed.Bool(err == nil && seat.Borrowed()))
	}
	switch {
	case err == nil:
		d.lease.seat = seat
		w := g.waits.get(pool)
		now := g.now()
		w.add(now, waitSumNanos, int64(seat.Waited()))
		w.add(now, waitCount, 1)
		if g.metrics != nil {
			g.metrics.queueWait.WithLabelValues(pool).Observe(seat.Waited().Seconds())
		}
	case errors.Is(err, bulkhead.ErrQueueFull):
		d.reject(ReasonQueueFull, g.retryHint(pool))
	case errors.Is(err, bulkhead.ErrWaitTimeout):
		d.reject(ReasonWaitTimeout, g.retryHint(pool))
	case errors.Is(err, context.DeadlineExceeded):
		// The request's own deadline ended its wait: the client is
		// still there (an embedding handler set the deadline), so it
		// gets the bulkhead's answer, not a silent 499.
		d.reject(ReasonWaitTimeout, g.retryHint(pool))
	case errors.Is(err, bulkhead.ErrDraining):
		d.reject(ReasonDraining, time.Second)
	case ctx.Err() != nil:
		return ctx.Err()
	default:
		return err
	}
	return nil
}

// retryHint is the Retry-After of a bulkhead rejection: the pool's own
// estimate of when a seat frees up.
func (g *Gate) retryHint(pool string) time.Duration {
	if st, ok := g.pools.Stats(pool); ok && st.RetryAfter > 0 {
		return st.RetryAfter
	}
	return time.Second
}
