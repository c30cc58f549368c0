package ratelimit

import (
	"math"
	"testing"
	"time"
)

func TestBucketTakeRefill(t *testing.T) {
	l := Limit{Rate: 5, Burst: 25}
	var now int64 = 1_000_000_000
	b := fullBucket(l, now)
	for i := range 25 {
		var r Result
		b, r = b.take(l, now, 1)
		if !r.Allowed {
			t.Fatalf("take %d denied with %v tokens", i, b.tokens)
		}
	}
	b, r := b.take(l, now, 1)
	if r.Allowed {
		t.Fatal("26th take allowed from a burst of 25")
	}
	if got, want := r.RetryAfter, 200*time.Millisecond; got != want {
		t.Fatalf("RetryAfter = %v, want %v", got, want)
	}
	if got, want := r.ResetAfter, 5*time.Second; got != want {
		t.Fatalf("ResetAfter = %v, want %v", got, want)
	}
	// 200 ms later exactly one token has come back.
	now += int64(200 * time.Millisecond)
	b, r = b.take(l, now, 1)
	if !r.Allowed || r.Remaining > 1e-9 {
		t.Fatalf("after 200ms: allowed=%v remaining=%v, want true 0", r.Allowed, r.Remaining)
	}
	// A cost of 5 needs a full second.
	_, r = b.take(l, now, 5)
	if r.Allowed || r.RetryAfter != time.Second {
		t.Fatalf("cost 5: allowed=%v retry=%v, want false 1s", r.Allowed, r.RetryAfter)
	}
}

func TestBucketClockBackwardsMintsNothing(t *testing.T) {
	l := Limit{Rate: 10, Burst: 10}
	b := bucket{tokens: 0, last: 10e9}
	b, r := b.take(l, 5e9, 1) // the clock went back 5 s
	if r.Allowed {
		t.Fatal("a clock going backwards refilled the bucket")
	}
	if b.last != 10e9 {
		t.Fatalf("last moved backwards to %d", b.last)
	}
}

// FuzzBucket checks the bucket against a simple reference: tokens stay in
// [0, burst], a take never adds tokens, and an allowed take removes exactly
// its cost from what refill gave.
func FuzzBucket(f *testing.F) {
	f.Add(5.0, 25.0, 1.0, int64(1e8), int64(3e9))
	f.Add(100.0, 500.0, 20.0, int64(0), int64(-1e9))
	f.Add(0.001, 1.0, 1.0, int64(1), int64(math.MaxInt32))
	f.Fuzz(func(t *testing.T, rate, burst, cost float64, dt1, dt2 int64) {
		if !(rate > 0 && rate < 1e9 && burst >= 1 && burst < 1e12 && cost > 0 && cost <= burst && burst/rate <= 1e9) {
			t.Skip()
		}
		l := Limit{Rate: rate, Burst: burst}
		now := int64(1e18)
		b := fullBucket(l, now)
		for _, dt := range []int64{dt1 % 1e12, dt2 % 1e12, 0} {
			before := b.tokensAt(l, now+dt)
			nb, r := b.take(l, now+dt, cost)
			if nb.tokens < 0 || nb.tokens > burst {
				t.Fatalf("tokens %v outside [0, %v]", nb.tokens, burst)
			}
			if r.Allowed {
				if math.Abs(nb.tokens-(before-cost)) > 1e-6*burst {
					t.Fatalf("allowed take: %v -> %v, cost %v", before, nb.tokens, cost)
				}
				if r.RetryAfter != 0 {
					t.Fatalf("allowed with RetryAfter %v", r.RetryAfter)
				}
				if got, want := nb.fullAfter(r), nb.fullAt(l); got != want {
					t.Fatalf("fullAfter %d, fullAt %d", got, want)
				}
			} else {
				if nb != b {
					t.Fatalf("denied take changed the state %+v -> %+v", b, nb)
				}
				if before >= cost {
					t.Fatalf("denied with %v tokens for cost %v", before, cost)
				}
				if r.RetryAfter <= 0 {
					t.Fatal("denied without RetryAfter")
				}
			}
			if nb.tokens > b.tokens+float64(max(dt1, dt2, 0))*rate/1e9+1e-6*burst && !r.Allowed {
				t.Fatalf("refund: %v -> %v", b.tokens, nb.tokens)
			}
			if nb.last < b.last {
				t.Fatal("last moved backwards")
			}
			b = nb
			now = b.last
		}
	})
}
