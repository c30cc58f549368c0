package admission

import (
	"context"
	"time"
)

// admitConcurrency runs the concurrency layer: the tenant's cap on requests
// in flight, kept per instance (ceil(max_concurrent / instances)). A
// tenant without a cap skips it. Over the cap: 429, since the tenant sent
// too much, not the service.
func (g *Gate) admitConcurrency(ctx context.Context, d *Decision) {
	t := d.Tenant
	if t.MaxConcurrent <= 0 {
		return
	}
	sp := g.layerSpan(ctx, SpanConcurrency)
	defer sp.end(d, LayerConcurrency)
	perInstance := (t.MaxConcurrent + g.instances - 1) / g.instances
	slot, ok := g.caps.TryAcquire(t.ID, perInstance)
	if sp.on() {
		sp.s.SetAttributes(attrMaxConcurrent.Int(perInstance), attrInFlight.Int(g.caps.InFlight(t.ID)))
	}
	if !ok {
		d.reject(ReasonMaxConcurrent, g.holdHint(d.pool()))
		return
	}
	d.lease.slot = slot
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
