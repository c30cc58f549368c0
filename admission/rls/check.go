package rls

import (
	"math"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// tokenReader is a store that can read a bucket without charging it:
// the embedded MemoryStore. A check is answered from it.
type tokenReader interface {
	// Tokens returns the tokens bucket k holds now under l, changing
	// nothing.
	Tokens(k ratelimit.BucketKey, l ratelimit.Limit) float64
}

var _ tokenReader = (*ratelimit.MemoryStore)(nil)

// check decides the checks at idx: descriptors whose own hits_addend is 0,
// which envoyproxy/ratelimit counts as no hit, so they ask whether the
// limit is reached and charge nothing. A check is over its limit when its
// bucket (or window) holds less than one token (a request of one would
// be refused); whether it then refuses the request is the refusal rule's
// (refused). A window's tokens come back at its end, which is its reset
// and, when over, its wait; now is the call's instant, which chose the
// window. On a store that cannot read a bucket without charging it (the
// Redis store), a check is admitted with its state unknown, as a failure
// policy that admits would be: it never refuses, and tells no state.
func (s *Service) check(req *rlsv3.RateLimitRequest, tag string, vs []verdict, idx []int, now time.Time) {
	tr, ok := s.store.(tokenReader)
	for _, i := range idx {
		v := &vs[i]
		if !ok {
			v.res = ratelimit.Result{Allowed: true, StateUnknown: true}
			continue
		}
		l := v.limit
		tokens := tr.Tokens(v.key(tag, req.Descriptors[i].GetEntries()), l)
		reset, wait := refill(l, l.Burst-tokens), refill(l, 1-tokens)
		if l.Fixed() {
			reset = untilEnd(l, now)
			wait = reset
		}
		v.res = ratelimit.Result{Allowed: tokens >= 1, Remaining: tokens, ResetAfter: reset}
		if !v.res.Allowed {
			v.res.RetryAfter = wait
			v.over = true
		}
	}
}

// refill is the time l takes to refill n tokens, rounded up to the
// nanosecond so that a client told to wait finds them there.
func refill(l ratelimit.Limit, n float64) time.Duration {
	d := n / l.Rate * 1e9
	switch {
	case d <= 0:
		return 0
	case d >= math.MaxInt64:
		return math.MaxInt64
	}
	return time.Duration(math.Ceil(d))
}
