package admission

import (
	"context"
	"net/http"
	"time"
)

// admitAdaptive runs the adaptive layer: a permit of the concurrency limit
// learned from upstream latency. With pools, the pools enforce the learned
// total (their seats follow it) and a request that won a seat fairly is
// never turned away here: without a permit it just teaches the limit
// nothing. Without pools the limiter itself is the gate. With
// Options.DeferAdaptive the permit is taken by Decision.StartUpstream
// instead, around the upstream call.
func (g *Gate) admitAdaptive(ctx context.Context, d *Decision) {
	if g.limiter == nil || g.deferAdaptive {
		return
	}
	sp := g.layerSpan(ctx, SpanAdaptive)
	defer sp.end(d, LayerAdaptive)
	p, ok := g.limiter.TryAcquire()
	if sp.on() {
		sp.s.SetAttributes(attrLimitCurrent.Int(g.limiter.Limit()), attrLimitInFlight.Int(g.limiter.Inflight()))
	}
	if !ok && g.pools == nil {
		g.reject(d, LayerAdaptive, http.StatusServiceUnavailable, "limit_reached", time.Second)
		return
	}
	d.held.permit = p
}
