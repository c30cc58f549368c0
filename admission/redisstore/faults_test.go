package redisstore

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/faultproxy"
	"github.com/fairgate/fairgate/internal/redistest"
)

// startFaultProxy starts a real Redis and a fault-injecting proxy in front
// of it, both stopped when t ends.
func startFaultProxy(t *testing.T) *faultproxy.Proxy {
	t.Helper()
	srv := redistest.StartServer(t)
	px, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Close() })
	return px
}

// TestFaultProxy puts a fault-injecting proxy between the store and a real
// Redis and goes through the faults a network gives: added latency, dropped
// connections, resets mid-reply, a black hole. In each, no decision waits
// much past the per-call deadline, the local policy answers, and the
// breaker opens; back on pass-through, decisions come from Redis again
// without any action. Goroutines are flat at the end.
func TestFaultProxy(t *testing.T) {
	px := startFaultProxy(t)
	base := runtime.NumGoroutine()
	const timeout = 20 * time.Millisecond
	s := newTestStore(t, []string{px.Addr()}, func(c *Config) {
		c.Timeout = timeout
		c.Breaker.OpenFor = 100 * time.Millisecond
	}, Options{})
	k := ratelimit.BucketKey{Tenant: "faulty"}
	ctx := context.Background()
	untilFromRedis(t, s, k) // pass-through works (polled: a cold call may miss 20 ms under -race)
	for _, f := range []faultproxy.Fault{
		{Mode: faultproxy.Latency, Latency: 200 * time.Millisecond},
		{Mode: faultproxy.Drop},
		{Mode: faultproxy.Reset, ResetAfter: 2},
		{Mode: faultproxy.BlackHole},
	} {
		t.Run(f.Mode.String(), func(t *testing.T) {
			px.Set(f)
			var slowest time.Duration
			policy := 0
			for range 40 {
				start := time.Now()
				r, out, err := s.Decide(ctx, k, bigLimit, 1)
				slowest = max(slowest, time.Since(start))
				if err != nil || !r.Allowed {
					t.Fatalf("local policy should admit under a big limit: %+v %v", r, err)
				}
				if out.Source == FromPolicy {
					policy++
				}
			}
			// The deadline bounds each call; the margin is for a loaded
			// 2-core machine, far below the 200 ms latency or a hang.
			if slowest > timeout+150*time.Millisecond {
				t.Errorf("slowest decision %v with a %v deadline", slowest, timeout)
			}
			if policy < 35 {
				t.Errorf("%d of 40 decisions by the policy, want nearly all", policy)
			}
			if st := s.BreakerState(); st == BreakerClosed {
				t.Errorf("breaker still closed after 40 failures")
			}
			// Back to normal: Redis decides again once the breaker probes.
			px.Set(faultproxy.Fault{})
			untilFromRedis(t, s, k)
		})
	}
	s.Close()
	px.Close()
	checkGoroutines(t, base)
}

// TestLateReplyDecides: Redis replying later than Timeout but within the
// round trip's deadline (three Timeouts) still decides every take, and the
// breaker stays closed however many such replies come in a row: a reply
// that came is Redis answering. The replies are counted slow. (While a
// late reply counted as a breaker failure, the fifth opened it.)
func TestLateReplyDecides(t *testing.T) {
	px := startFaultProxy(t)
	const timeout = 40 * time.Millisecond
	s := newTestStore(t, []string{px.Addr()}, func(c *Config) { c.Timeout = timeout }, Options{})
	k := ratelimit.BucketKey{Tenant: "late"}
	untilFromRedis(t, s, k)
	px.Set(faultproxy.Fault{Mode: faultproxy.Latency, Latency: 3 * timeout / 2})
	before := s.Stats()
	for i := range 12 {
		if _, out, err := s.Decide(context.Background(), k, bigLimit, 1); err != nil || out.Source != FromRedis {
			t.Fatalf("take %d: %+v %v, want a decision from Redis", i, out, err)
		}
	}
	if st := s.BreakerState(); st != BreakerClosed {
		t.Errorf("breaker %v after late replies, want closed", st)
	}
	if st := s.Stats(); st.RoundTripsSlow-before.RoundTripsSlow < 12 {
		t.Errorf("%d slow round trips counted, want 12", st.RoundTripsSlow-before.RoundTripsSlow)
	}
}

// untilFromRedis polls until a decision comes from Redis (the breaker
// closed again), failing after 5 s.
func untilFromRedis(t *testing.T, s *Store, k ratelimit.BucketKey) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, out, _ := s.Decide(context.Background(), k, bigLimit, 1); out.Source == FromRedis {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no decision from Redis within 5s")
		}
		time.Sleep(10 * time.Millisecond) // waiting out the breaker's open_for, bounded
	}
}

// TestBackwardClockTTL: when Redis's clock is behind the bucket's last
// instant (a failover to a replica whose clock lags), the key must live
// until the bucket is really full: (last - now) + refill, not just the
// refill from now, or the bucket comes back full early.
func TestBackwardClockTTL(t *testing.T) {
	srv := redistest.StartServer(t)
	// A generous deadline: this test is about the script, not timeouts
	// (under -race a 5 ms call can miss and fall to the policy).
	s := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.DenyCacheSize = -1; c.Timeout = time.Second }, Options{})
	ctx := context.Background()
	k := ratelimit.BucketKey{Tenant: "skewed"}
	key := bucketKey(k)
	// A full bucket of 2 whose last instant is 2 s in Redis's future.
	if _, err := s.client.Eval(ctx, "local t=redis.call('TIME'); local now=tonumber(t[1])*1000000+tonumber(t[2]); "+
		"redis.call('SET', KEYS[1], struct.pack('<dd', 2, now+2000000)); return 1", []string{key}).Result(); err != nil {
		t.Fatal(err)
	}
	l := ratelimit.Limit{Rate: 1, Burst: 2}
	if r, out, err := s.Decide(ctx, k, l, 1); err != nil || !r.Allowed {
		t.Fatalf("take from a full bucket: %+v %+v %v", r, out, err)
	}
	pttl, err := s.client.PTTL(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	// Full again 1 s (refill of the token taken) after last, which is 2 s
	// ahead: about 3 s.
	if pttl < 2900*time.Millisecond {
		t.Fatalf("PTTL %v, want about 3s (the bucket would come back full early)", pttl)
	}
}

// TestScriptErrorDoesNotOpenBreaker: an error Redis answers for one
// tenant's arguments is not Redis being unhealthy; it must not open the
// breaker for everyone else.
func TestScriptErrorDoesNotOpenBreaker(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.Timeout = time.Second }, Options{})
	ctx := context.Background()
	k := ratelimit.BucketKey{Tenant: "wrongtype"}
	// A key of the wrong type: every script call on it errors (WRONGTYPE).
	if err := s.client.LPush(ctx, bucketKey(k), "x").Err(); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		s.Decide(ctx, k, bigLimit, 1)
	}
	if st := s.BreakerState(); st != BreakerClosed {
		t.Fatalf("breaker %v after script errors on one key", st)
	}
	if _, out, err := s.Decide(ctx, ratelimit.BucketKey{Tenant: "innocent"}, bigLimit, 1); err != nil || out.Source != FromRedis {
		t.Fatalf("another tenant after one key's errors: %+v %v", out, err)
	}
}
