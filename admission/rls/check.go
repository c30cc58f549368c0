package rls

import (
	"context"
	"math"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// tokenReader is a store that can read a bucket without charging it:
// the embedded MemoryStore, whose read cannot fail.
type tokenReader interface {
	// Tokens returns the tokens bucket k holds now under l, changing
	// nothing.
	Tokens(k ratelimit.BucketKey, l ratelimit.Limit) float64
}

// peeker is a store that reads a request's buckets without charging
// them, all in one call that may fail: the Redis store, one script call.
type peeker interface {
	// Peek writes into res what a take of each of takes (of one tenant)
	// would be told now, charging nothing.
	Peek(ctx context.Context, takes []ratelimit.Take, res []ratelimit.Result) error
}

var _ tokenReader = (*ratelimit.MemoryStore)(nil)

// check decides the checks at idx: descriptors whose own hits_addend is 0,
// which envoyproxy/ratelimit counts as no hit, so they ask whether the
// limit is reached and charge nothing. A check is over its limit when its
// bucket (or window) holds less than one token (a request of one would
// be refused); whether it then refuses the request is the refusal rule's
// (refused). A window's tokens come back at its end, which is its reset
// and, when over, its wait; now is the call's instant, which chose the
// window. The checks whose tokens cannot be read (a store that reads
// none, or the Redis store when Redis does not answer) are admitted with
// their state unknown: a check never refuses for want of a store, and
// tells no state it did not read.
func (s *Service) check(req *rlsv3.RateLimitRequest, tag string, vs []verdict, idx []int, now time.Time) {
	tokens := s.checkTokens(req, tag, vs, idx)
	for j, i := range idx {
		v := &vs[i]
		if tokens == nil {
			v.res = ratelimit.Result{Allowed: true, StateUnknown: true}
			continue
		}
		l := v.limit
		reset, wait := refill(l, l.Burst-tokens[j]), refill(l, 1-tokens[j])
		if l.Fixed() {
			reset = untilEnd(l, now)
			wait = reset
		}
		v.res = ratelimit.Result{Allowed: tokens[j] >= 1, Remaining: tokens[j], ResetAfter: reset}
		if !v.res.Allowed {
			v.res.RetryAfter = wait
			v.over = true
		}
	}
}

// checkTokens returns the tokens the buckets (or windows) of the checks
// at idx hold now, in idx's order, or nil when the store did not read
// them. On the Redis store they are read in one call, whatever their
// number; one Redis does not answer reads nothing, under every
// redis.failure_policy: a check charges nothing, so admitting it spends
// no quota, and the call's charges, if any, still follow the policy. The
// read is bounded by the store's own deadlines, as a take is.
func (s *Service) checkTokens(req *rlsv3.RateLimitRequest, tag string, vs []verdict, idx []int) []float64 {
	tokens := make([]float64, len(idx))
	switch st := s.store.(type) {
	case tokenReader:
		for j, i := range idx {
			tokens[j] = st.Tokens(vs[i].key(tag, req.Descriptors[i].GetEntries()), vs[i].limit)
		}
	case peeker:
		takes, res := make([]ratelimit.Take, len(idx)), make([]ratelimit.Result, len(idx))
		for j, i := range idx {
			// A cost of one: the check's question, whether a request of
			// one would be refused.
			takes[j] = ratelimit.Take{Key: vs[i].key(tag, req.Descriptors[i].GetEntries()), Limit: vs[i].limit, Cost: 1}
		}
		if err := st.Peek(context.Background(), takes, res); err != nil {
			return nil
		}
		for j := range res {
			tokens[j] = res[j].Remaining
		}
	default:
		return nil
	}
	return tokens
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
