package ratelimit

import (
	"math"
	"time"
)

// bucket is the state of one token bucket: tokens held at instant last
// (Unix nanoseconds). Its arithmetic is a pure function of now, so tests and
// the fuzzer need no clock.
type bucket struct {
	tokens float64
	last   int64
}

// fullBucket returns the state of a bucket seen for the first time at now.
func fullBucket(l Limit, now int64) bucket { return bucket{tokens: l.Burst, last: now} }

// tokensAt returns the tokens b holds at now under l: refilled since last,
// capped at l.Burst. A clock that went backwards refills nothing.
func (b bucket) tokensAt(l Limit, now int64) float64 {
	elapsed := now - b.last
	if elapsed <= 0 {
		return math.Min(b.tokens, l.Burst)
	}
	return math.Min(l.Burst, b.tokens+float64(elapsed)/1e9*l.Rate)
}

// take takes cost tokens at now when the bucket holds them. It returns the
// new state and the result. The state's last never moves backwards, so a
// skewed clock cannot mint tokens. A denial changes nothing: the state
// refills from its old instant exactly as from now (the Redis script skips
// its write then).
func (b bucket) take(l Limit, now int64, cost float64) (bucket, Result) {
	tokens := b.tokensAt(l, now)
	if tokens < cost {
		return b, denial(l, tokens, cost)
	}
	tokens -= cost
	return bucket{tokens: tokens, last: max(now, b.last)}, Result{
		Allowed:    true,
		Remaining:  tokens,
		ResetAfter: secondsToDuration((l.Burst - tokens) / l.Rate),
	}
}

// denial is the Result of a take of cost refused by a bucket holding
// tokens under l: RetryAfter is the time until it holds cost (zero when it
// does already: a TakeAll refused by another bucket).
func denial(l Limit, tokens, cost float64) Result {
	return Result{
		Remaining:  max(tokens, 0), // a bucket a settlement took into debt holds none
		RetryAfter: secondsToDuration((cost - tokens) / l.Rate),
		ResetAfter: secondsToDuration((l.Burst - tokens) / l.Rate),
	}
}

// fullAt returns the instant (Unix ns) at which b is full again under l.
// A bucket past that instant is the same as one never seen, so a store may
// forget it.
func (b bucket) fullAt(l Limit) int64 {
	need := (l.Burst - b.tokens) / l.Rate
	if need <= 0 {
		return b.last
	}
	return b.last + int64(math.Ceil(need*1e9))
}

// fullAfter is b's fullAt under the limit of the take that made b and
// answered r, an allowed one: its ResetAfter is the same arithmetic, done
// once.
func (b bucket) fullAfter(r Result) int64 {
	if b.last > math.MaxInt64-int64(r.ResetAfter) { // ResetAfter ≥ 0
		return math.MaxInt64
	}
	return b.last + int64(r.ResetAfter)
}

// secondsToDuration converts s seconds to a Duration, rounding up so a
// client told to wait that long finds the tokens there.
func secondsToDuration(s float64) time.Duration {
	if s <= 0 {
		return 0
	}
	if s >= math.MaxInt64/1e9 {
		return math.MaxInt64 // never for a validated config (burst/rate ≤ 1e9 s)
	}
	return time.Duration(math.Ceil(s * 1e9))
}
