package admission

import (
	"github.com/fairgate/fairgate/bulkhead"
	"github.com/fairgate/fairgate/shed"
)

// held is what a request took from the layers that hold something while it
// is served. The zero value holds nothing; releasing twice is harmless.
type held struct {
	g      *Gate
	slot   bulkhead.Slot
	seat   bulkhead.Seat
	permit shed.Permit
	shed   *poolShed
	// answered is set by UpstreamAnswered: the permit is released and
	// the completion counted already.
	answered bool
}

// release gives everything back, last taken first. ok says the upstream
// answered: its latency teaches the adaptive limit, and the pool's shedder
// counts a completion. Otherwise the permit is dropped without learning.
// With a deferred adaptive layer (Options.DeferAdaptive) only
// UpstreamAnswered teaches and counts: release then just gives back.
func (h *held) release(ok bool) {
	if h.g == nil {
		return
	}
	if !h.answered {
		if ok && !h.g.deferAdaptive {
			h.permit.Record()
			if h.shed != nil {
				h.shed.completed.Add(1)
			}
		} else {
			h.permit.Drop()
		}
	}
	h.seat.Release()
	h.slot.Release()
	*h = held{}
}

// StartUpstream takes the adaptive permit just before the upstream call,
// for a gate built with Options.DeferAdaptive (the gateway does this, so
// that the limit learns the upstream's latency and not the time a client
// takes to send its body or read the answer). With bulkhead pools it
// always reports true (the pools enforce the learned total; a request
// without a permit just teaches nothing). Without pools, false means the
// adaptive limit is reached: answer 503 with layer "adaptive" and call Done.
func (d *Decision) StartUpstream() bool {
	g := d.held.g
	if g == nil || g.limiter == nil || !g.deferAdaptive {
		return true
	}
	p, ok := g.limiter.TryAcquire()
	if !ok && g.pools == nil {
		return false
	}
	d.held.permit = p
	return true
}

// UpstreamAnswered tells the gate the upstream's response headers arrived:
// the adaptive limit learns the call's latency now and the pool counts a
// completion, whatever happens to the response body afterwards. Done still
// releases the seat and slot.
func (d *Decision) UpstreamAnswered() {
	h := &d.held
	if h.g == nil || h.answered {
		return
	}
	h.answered = true
	h.permit.Record()
	if h.shed != nil {
		h.shed.completed.Add(1)
	}
}
