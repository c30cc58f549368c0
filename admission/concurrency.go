package admission

import (
	"context"
	"time"

	"github.com/fairgate/fairgate/shed"
)

// admitConcurrency runs the concurrency layer: the tenant's cap on requests
// executing upstream, kept per instance (ceil(max_concurrent / instances)),
// with a reserve above it for critical requests so that a tenant's own
// sheddable work cannot lock out its critical reads. A tenant without a cap
// skips it. Over the cap: 429, since the tenant sent too much, not the
// service.
//
// The cap counts requests holding a seat, not those waiting in fairgate's
// own queue (as APF counts seats): with bulkhead pools, this layer refuses
// a tenant already at its cap at once, and the pools hand a queued request
// a seat only while its tenant is under the cap. Without pools nothing
// queues, so a slot is taken here.
func (g *Gate) admitConcurrency(ctx context.Context, d *Decision) {
	t := d.Tenant
	if t.MaxConcurrent <= 0 {
		return
	}
	sp := g.layerSpan(ctx, SpanConcurrency)
	defer sp.end(d, LayerConcurrency)
	limit := g.capFor(d)
	if g.pools != nil {
		n := g.pools.Executing(t.ID)
		if sp.on() {
			sp.s.SetAttributes(attrMaxConcurrent.Int(limit), attrInFlight.Int(n))
		}
		if n >= limit {
			d.reject(ReasonMaxConcurrent, g.holdHint(d.pool()))
		}
		return
	}
	slot, ok := g.caps.TryAcquire(t.ID, limit)
	if sp.on() {
		sp.s.SetAttributes(attrMaxConcurrent.Int(limit), attrInFlight.Int(g.caps.InFlight(t.ID)))
	}
	if !ok {
		d.reject(ReasonMaxConcurrent, g.holdHint(d.pool()))
		return
	}
	d.lease.slot = slot
}

// capFor is the cap on d's tenant's executing requests that applies to d on
// this instance; 0 means none.
func (g *Gate) capFor(d *Decision) int {
	return d.Tenant.CapFor(d.Route.Criticality == shed.Critical, g.instances())
}

// holdHint is the Retry-After of a concurrency rejection: how long a request
// of the pool holds its seat on average (one of the tenant's requests in
// flight will likely have finished by then).
func (g *Gate) holdHint(pool string) time.Duration {
	if g.pools != nil {
		if st, ok := g.pools.Stats(pool); ok && st.MeanHold > 0 {
			return st.MeanHold
		}
	}
	return time.Second
}
