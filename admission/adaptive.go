package admission

import (
	"context"

	"github.com/fairgate/fairgate/shed"
)

// admitAdaptive runs the adaptive layer: a permit of the concurrency limit
// learned from upstream latency. It guards the upstream call itself, so it
// runs from Lease.StartUpstream rather than from Check. With pools, the
// pools enforce the learned total (their seats follow it) and a request
// that won a seat fairly is never turned away here: without a permit it
// just teaches the limit nothing. Without pools the limiter itself is the
// gate, and false means the limit is reached.
//
// The route is the call's latency class: the limit judges each call
// against its route's typical latency (shed.Limiter.TryAcquireClass).
// Without pools, a non-critical call leaves the critical requests'
// reserve (criticalReserve).
func (g *Gate) admitAdaptive(ctx context.Context, class int, critical bool) (shed.Permit, bool) {
	if g.limiter == nil {
		return shed.Permit{}, true
	}
	sp := g.layerSpan(ctx, SpanAdaptive)
	keep := 0
	if g.reserve != nil && !critical {
		keep = g.reserve.size()
	}
	p, ok := g.limiter.TryAcquireLeaving(class, keep)
	if ok && critical && g.reserve != nil {
		g.reserve.add(int64(g.now().Sub(g.epoch)), +1)
	}
	if sp.on() {
		sp.s.SetAttributes(attrLimitCurrent.Int(g.limiter.Limit()), attrLimitInFlight.Int(g.limiter.Inflight()))
	}
	ok = ok || g.pools != nil
	sp.endLayer(LayerAdaptive, !ok, ReasonLimitReached)
	return p, ok
}
