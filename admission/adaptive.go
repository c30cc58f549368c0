package admission

import (
	"context"

	"github.com/fairgate/fairgate/shed"
)

// fairPool is the one pool of Gate.fair.
const fairPool = "adaptive"

// fairLimit reports whether the adaptive limit is shared by tenant
// (limitByShare): there are no pools to share it.
func (g *Gate) fairLimit() bool { return g.fair != nil && g.rules&limitByShare != 0 }

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
// reserve (criticalReserve), and the permits are shared by tenant as a
// pool's seats are (limitByShare): a seat of Gate.fair, which never
// waits, decides, and as with pools a request that won one fairly goes on
// without a permit if it must (a light tenant may be owed a call beyond
// the limit while a flood holds the calls it took before the light
// tenant came).
func (g *Gate) admitAdaptive(ctx context.Context, l *Lease) (shed.Permit, bool) {
	if g.limiter == nil {
		return shed.Permit{}, true
	}
	sp := g.layerSpan(ctx, SpanAdaptive)
	keep := 0
	if g.reserve != nil && !l.critical {
		keep = g.reserve.size()
	}
	p, ok := g.limiter.TryAcquireLeaving(l.route.class, keep)
	switch {
	case g.pools != nil:
		ok = true
	case ok && l.critical && g.reserve != nil:
		// A critical call with a permit has the reserve for its share:
		// the tenants' division of the limit is for the rest, and its
		// seats are held until the response is written, after the
		// permit.
	case g.fairLimit() && (ok || keep == 0):
		var err error
		if l.fairSeat, err = g.fair.Acquire(ctx, fairPool, l.fairRequest); err != nil {
			p.Drop()
			p = shed.Permit{}
		}
		ok = err == nil
	}
	if ok && l.critical && g.reserve != nil {
		g.reserve.add(int64(g.now().Sub(g.epoch)), +1)
		l.reserved = true
	}
	if sp.on() {
		sp.s.SetAttributes(attrLimitCurrent.Int(g.limiter.Limit()), attrLimitInFlight.Int(g.limiter.Inflight()))
	}
	sp.endLayer(LayerAdaptive, !ok, ReasonLimitReached)
	return p, ok
}
