package admission

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"github.com/fairgate/fairgate/bulkhead"
	"github.com/fairgate/fairgate/shed"
)

// admitShed runs the shedding layer, before the bulkhead so that a shed
// request never queues. Each pool has its shedder: a pool sheds when its own
// queue builds, so one tier's flood never sheds another tier's requests
// while the upstream has room.
//
// Shedding sees tenants: a request of a tenant whose use of the pool is
// within its fair share (bulkhead.Pools.Share) is not why the queue builds
// and is never shed (the fair queue orders it); only tenants above their
// shares are shed, lowest priority first. When the upstream is the
// bottleneck (every seat of the total taken), the pools shed together: no
// pool admits a priority below the band another pool is shedding in
// (shed.FloorFor), so no pool admits sheddable work while another sheds
// default or critical requests.
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
	within, use, share, work := false, 0.0, 0.0, shed.UnitWork
	if shares, name := g.sharesFor(pool); shares != nil && g.rules&shedByShare != 0 {
		r := d.Route
		st := shares.Arrive(name, bulkhead.Request{Tenant: d.Tenant.ID, Weight: d.Tenant.Weight, Cost: int(d.cost()), Class: r.class})
		d.arrived = true
		within, use, share = st.Within, st.Use, st.Share
		if st.Hold > 0 {
			work = st.Hold
		}
	}
	d.lease.work = work
	prio := d.Priority
	floor := shed.Priority(g.shedFloor.Load())
	if sp.on() {
		sp.s.SetAttributes(attrPool.String(pool), attrPriority.Int(int(prio)), attrThreshold.Int(int(ps.shedder.Threshold())),
			attrShedFloor.Int(int(floor)), attrShareWithin.Bool(within), attrShareUse.Float64(round3(use)))
		if !math.IsInf(share, 1) { // +Inf: nobody is above share; JSON has no Inf
			sp.s.SetAttributes(attrShare.Float64(round3(share)))
		}
	}
	if within {
		ps.shedder.AdmitExempt(prio, work)
		return
	}
	ok, retry := ps.shedder.Admit(prio, work)
	if ok && prio < floor {
		ok, retry = false, time.Duration(g.floorRetry.Load())
	}
	if !ok {
		d.reject(ReasonPriority, max(retry, time.Second))
	}
}

// sharesFor returns the pools whose fair shares the shedder of pool sees,
// and pool's name in them: the bulkhead's, or without pools the adaptive
// limit's shared by tenant; nil when there are neither.
func (g *Gate) sharesFor(pool string) (*bulkhead.Pools, string) {
	switch {
	case g.pools != nil:
		return g.pools, pool
	case g.fairLimit():
		return g.fair, fairPool
	}
	return nil, ""
}

// poolShed is one pool's shedder and the counters it learns from.
type poolShed struct {
	shedder     *shed.Shedder
	queueCap    int
	completed   atomic.Uint64
	work        atomic.Int64 // the completed calls' work, as given to the shedder (ns)
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
// times a calibration interval, from whichever request comes first, and
// then recomputes the floor the pools shed below together.
func (g *Gate) observe(ps *poolShed, pool string) {
	now := g.now()
	t := int64(now.Sub(g.epoch)) // monotonic with time.Now: a wall step freezes nothing
	next := ps.nextObserve.Load()
	// Not yet due, unless the clock went back (a clock without a
	// monotonic reading): then observe now rather than wait out the step.
	if t < next && next-t <= ps.every || !ps.nextObserve.CompareAndSwap(next, t+ps.every) {
		return
	}
	p := shed.Pressure{QueueCap: ps.queueCap, Completed: ps.completed.Load(), CompletedWork: time.Duration(ps.work.Load())}
	if g.pools != nil {
		st, _ := g.pools.Stats(pool)
		p.Queued, p.Inflight = st.Queued, st.InFlight
		p.Limit = max(1, st.Seats-st.Lent+st.Borrowed)
	} else {
		p.Inflight, p.Limit = g.limiter.Inflight(), g.limiter.Limit()
		if g.reserve != nil {
			g.reserve.refresh(t)
		}
	}
	ps.shedder.Observe(now, p)
	g.updateShedFloor()
}

// updateShedFloor sets the priority below which every pool sheds: while
// every seat of the total is taken (the upstream is the bottleneck), the
// floor of the band the most-shedding pool sheds in; otherwise none.
func (g *Gate) updateShedFloor() {
	if g.pools == nil || len(g.shedders) < 2 || g.rules&shedTogether == 0 {
		return
	}
	inflight := 0
	for name := range g.shedders {
		st, _ := g.pools.Stats(name)
		inflight += st.InFlight
	}
	var floor shed.Priority
	var retry time.Duration
	if inflight >= g.pools.Total() {
		for _, ps := range g.shedders {
			if f := shed.FloorFor(ps.shedder.Threshold()); f > floor {
				floor, retry = f, ps.shedder.RetryAfter()
			}
		}
	}
	g.floorRetry.Store(int64(retry))
	g.shedFloor.Store(int32(floor))
}
