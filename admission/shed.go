package admission

import (
	"context"
	"sync/atomic"

	"github.com/fairgate/fairgate/shed"
)

// admitShed runs the shedding layer, before the bulkhead so that a shed
// request never queues. Shedding is per pool: a pool sheds when its own
// queue builds, lowest priority first, so one tier's flood never sheds
// another tier's requests.
func (g *Gate) admitShed(ctx context.Context, d *Decision) {
	pool := d.pool()
	ps := g.shedderFor(pool)
	if ps == nil {
		return
	}
	sp := g.layerSpan(ctx, SpanShed)
	defer sp.end(d, LayerShed)
	d.lease.shed = ps
	g.observe(ps, pool)
	prio := d.Priority
	ok, retry := ps.shedder.Admit(prio)
	if sp.on() {
		sp.s.SetAttributes(attrPool.String(pool), attrPriority.Int(int(prio)), attrThreshold.Int(int(ps.shedder.Threshold())))
	}
	if !ok {
		d.reject(ReasonPriority, retry)
	}
}

// poolShed is one pool's shedder and the counters it learns from.
type poolShed struct {
	shedder     *shed.Shedder
	queueCap    int
	completed   atomic.Uint64
	nextObserve atomic.Int64 // ns since the gate's epoch
	every       int64        // ns between observations
}

func (g *Gate) shedderFor(pool string) *poolShed {
	if g.shedders == nil {
		return nil
	}
	if g.pools == nil {
		return g.shedders[""]
	}
	return g.shedders[pool]
}

// observe tells a pool's shedder the pressure on the pool, at most twenty
// times a calibration interval, from whichever request comes first.
func (g *Gate) observe(ps *poolShed, pool string) {
	now := g.now()
	t := int64(now.Sub(g.epoch)) // monotonic with time.Now: a wall step freezes nothing
	next := ps.nextObserve.Load()
	// Not yet due, unless the clock went back (a clock without a
	// monotonic reading): then observe now rather than wait out the step.
	if t < next && next-t <= ps.every || !ps.nextObserve.CompareAndSwap(next, t+ps.every) {
		return
	}
	p := shed.Pressure{QueueCap: ps.queueCap, Completed: ps.completed.Load()}
	if g.pools != nil {
		st, _ := g.pools.Stats(pool)
		p.Queued, p.Inflight = st.Queued, st.InFlight
		p.Limit = max(1, st.Seats-st.Lent+st.Borrowed)
	} else {
		p.Inflight, p.Limit = g.limiter.Inflight(), g.limiter.Limit()
	}
	ps.shedder.Observe(now, p)
}
