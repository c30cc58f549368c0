package admission

import (
	"context"
	"time"

	"github.com/fairgate/fairgate/bulkhead"
	"github.com/fairgate/fairgate/shed"
)

// Lease is what an admitted request holds while it is served: the tenant's
// concurrency slot, a bulkhead seat, its pool's shedder (to count the
// completion) and, once the upstream call starts, an adaptive permit.
//
// The life of a lease, for a caller that makes the upstream call itself
// (a reverse proxy; Gate.ProxyMiddleware leaves these calls to it):
//
//	if !lease.StartUpstream(ctx) { … 503 ReasonLimitReached … }
//	resp, err := call upstream
//	if err == nil { lease.AnsweredStatus(resp.StatusCode) } // the limit learns the latency
//	if no answer { lease.UpstreamFailed() }
//	…
//	lease.Release() // always, once the request is done
//
// Gate.Middleware does all three around the handler it wraps.
//
// Every method may be called more than once and in any state: each resource
// is given back exactly once, and after Release the lease holds nothing. The
// zero Lease holds nothing. A Lease is not safe for concurrent use, and must
// not be copied once the request is admitted: use the one Decision.Lease
// returns.
type Lease struct {
	g      *Gate // nil: holds nothing
	slot   bulkhead.Slot
	seat   bulkhead.Seat
	shed   *poolShed
	work   time.Duration // the call's work as the shedder counted it
	permit shed.Permit
	route  *Route // its latency class for the adaptive limit, its name for the upstream's metric
	// critical: the route is critical, which may take the adaptive
	// limit's critical reserve; reserved: the permit is counted in it.
	critical, reserved bool
	// exempt: the request passes the shared layers, the adaptive limit
	// with them (Decision.Exempt).
	exempt bool
	// fairRequest is the request as the adaptive limit's fair share sees
	// it, without pools (Gate.fairLimit); fairSeat its seat there.
	fairRequest bulkhead.Request
	fairSeat    bulkhead.Seat
	// started: StartUpstream ran (a permit is held, or there is no adaptive
	// layer to hold one of). answered: Answered ran (the permit is
	// released and the completion counted).
	started, answered bool
	// upStart is when StartUpstream ran (Gate.elapsed), with metrics on:
	// the start of the call fairgate_upstream_duration_seconds times.
	upStart time.Duration
	// refused: StartUpstream found the adaptive limit reached; the
	// request was rejected after all.
	refused bool
	// settle is what settles the request's usage at Release, when its
	// route settles and the reserve was charged.
	settle pendingSettle
}

// Lease returns what the admitted request holds. It is the lease of d
// itself, so call it on the Decision that Check returned (or the one
// FromContext gives), not on a copy.
func (d *Decision) Lease() *Lease { return &d.lease }

// StartUpstream runs the adaptive layer for the upstream call about to
// start, so that the adaptive limit times the upstream alone and not the
// client sending its body or reading the answer. With bulkhead pools it
// always reports true (the pools enforce the learned total; a request
// without a permit just teaches nothing). Without pools, false means the
// adaptive limit is reached: the lease is released, and the request gets a
// 503 with ReasonLimitReached. It reports true when the lease holds
// nothing, and on every call after the first.
func (l *Lease) StartUpstream(ctx context.Context) bool {
	if l.g == nil || l.started {
		return true
	}
	l.started = true
	if l.g.metrics != nil {
		l.upStart = l.g.elapsed()
	}
	if l.exempt {
		return true
	}
	p, ok := l.g.admitAdaptive(ctx, l)
	if !ok {
		l.Release()
		l.refused = true // after Release, which clears the lease
		return false
	}
	l.permit = p
	return true
}

// Answered tells the gate the upstream answered (its response headers
// arrived, or the wrapped handler returned): the adaptive limit learns the
// call's latency now and the pool's shedder counts a completion, whatever
// happens to the response body afterwards. Release still gives back the
// seat and slot. Call it only for a call that says something about the
// upstream's capacity, not when the upstream could not be reached or the
// client went away.
//
// A route charged on some statuses (charge_on_status) charges a call
// answered so, its status unknown: AnsweredStatus says it.
func (l *Lease) Answered() { l.AnsweredStatus(0) }

// AnsweredStatus is Answered for an upstream that answered status: the
// call, from StartUpstream until now, is also recorded in
// fairgate_upstream_duration_seconds under its status class (not when
// status is 0, unknown).
func (l *Lease) AnsweredStatus(status int) {
	if l.g == nil || l.answered {
		return
	}
	if status != 0 {
		l.observeUpstream(status)
	}
	l.answered, l.settle.status = true, status
	l.permit.Record()
	l.unreserve()
	if l.shed != nil {
		l.shed.completed.Add(1)
		l.shed.work.Add(int64(l.work))
	}
}

// UpstreamFailed is Release for a call the upstream did not answer (the
// connection was refused or reset, the call timed out): the call is
// recorded in fairgate_upstream_duration_seconds as status class error,
// and the adaptive limit learns nothing from it. Not for a client that
// went away: that says nothing of the upstream.
func (l *Lease) UpstreamFailed() {
	if l.g != nil && !l.answered {
		l.observeUpstream(0)
	}
	l.Release()
}

// observeUpstream records the call started by StartUpstream, which status
// (0: none) ended.
func (l *Lease) observeUpstream(status int) {
	if l.g.metrics != nil && l.started {
		l.g.metrics.red.upstreamCall(l.route.Name, status, l.g.elapsed()-l.upStart)
	}
}

// unreserve gives the critical reserve back the permit just released.
func (l *Lease) unreserve() {
	if l.reserved {
		l.reserved = false
		l.g.reserve.add(int64(l.g.now().Sub(l.g.epoch)), -1)
	}
}

// Release gives back everything the lease holds, last taken first: the
// permit (without learning, unless Answered ran), the seat and the slot.
// Call it once the request is done, whatever happened; later calls do
// nothing.
func (l *Lease) Release() {
	if l.g == nil {
		return
	}
	if !l.answered {
		l.permit.Drop()
		l.unreserve()
	} else if l.settle.st != nil {
		// Answered: what the request used is known (a request the
		// upstream never answered keeps its reserve, as a refused one
		// keeps its cost).
		l.g.settleRequest(l)
	}
	l.fairSeat.Release()
	l.seat.Release()
	l.slot.Release()
	*l = Lease{}
}
