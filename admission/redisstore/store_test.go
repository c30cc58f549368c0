package redisstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/redistest"
)

// TestMatchesReference runs a sequence of takes through the script and,
// at the very instants the script read from Redis's clock, through
// admission's embedded store: every result must be identical.
func TestMatchesReference(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.Batch.Disabled = true; c.Timeout = time.Second }, Options{})
	ref := ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{})
	ctx := context.Background()
	limits := []ratelimit.Limit{{Rate: 2000, Burst: 10}, {Rate: 0.5, Burst: 3}, {Rate: 333.3, Burst: 7.5}}
	costs := []float64{1, 2.5, 4, 0.3, 11}
	for li, l := range limits {
		k := ratelimit.BucketKey{Tenant: fmt.Sprintf("ref-%d", li), Scope: "s"}
		denied := 0
		for i := range 60 {
			cost := costs[i%len(costs)]
			res := make([]ratelimit.Result, 1)
			nowUS, err := s.evalTakes(ctx, []ratelimit.Take{{Key: k, Limit: l, Cost: cost}}, res)
			if err != nil {
				t.Fatalf("eval: %v", err)
			}
			got := res[0]
			want := ref.TakeAt(nowUS*1000, k, l, cost)
			if got != want {
				t.Fatalf("limit %v, step %d, cost %v at %dµs:\n got %+v\nwant %+v", l, i, cost, nowUS, got, want)
			}
			if !got.Allowed {
				denied++
			}
		}
		if denied == 0 {
			t.Errorf("limit %v: no take was denied; the sequence tests nothing", l)
		}
	}
}

// admitAll drives takes of cost 1 on bucket k from workers goroutines
// spread over stores until d has passed, and returns how many were admitted.
func admitAll(t *testing.T, stores []ratelimit.Store, k ratelimit.BucketKey, l ratelimit.Limit, workers int, d time.Duration) (admitted int64, elapsed time.Duration) {
	t.Helper()
	var n atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			st := stores[w%len(stores)]
			for time.Since(start) < d {
				r, err := st.Take(context.Background(), k, l, 1)
				if err != nil {
					t.Errorf("Take: %v", err)
					return
				}
				if r.Allowed {
					n.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return n.Load(), time.Since(start)
}

// TestSharedLimit: three instances on one Redis admit one burst plus the
// refill, not three bursts; three embedded stores (the negative control)
// admit about three.
func TestSharedLimit(t *testing.T) {
	srv := redistest.StartServer(t)
	l := ratelimit.Limit{Rate: 20, Burst: 50}
	k := ratelimit.BucketKey{Tenant: "shared"}
	// FailClosed: a decision Redis did not make is an error, not a local
	// admission that would blur the count.
	edit := func(c *Config) { c.Timeout = time.Second; c.FailurePolicy = FailClosed }
	var stores []ratelimit.Store
	for range 3 {
		stores = append(stores, newTestStore(t, []string{srv.Addr()}, edit, Options{}))
	}
	admitted, elapsed := admitAll(t, stores, k, l, 24, 300*time.Millisecond)
	ceiling := l.Burst + l.Rate*elapsed.Seconds() + 1
	if float64(admitted) > ceiling || float64(admitted) < l.Burst {
		t.Errorf("shared: admitted %d in %v, want in [%v, %.1f]", admitted, elapsed, l.Burst, ceiling)
	}

	var local []ratelimit.Store
	for range 3 {
		local = append(local, ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{}))
	}
	admitted, elapsed = admitAll(t, local, k, l, 24, 100*time.Millisecond)
	if ceiling := l.Burst + l.Rate*elapsed.Seconds() + 1; float64(admitted) <= ceiling {
		t.Errorf("negative control: 3 unshared stores admitted %d, want > %.1f", admitted, ceiling)
	}
}

// TestClusterSharedLimit: the same on a 3-master cluster, with tenants spread
// over slots and two scopes each; no take may fail (a CROSSSLOT would).
func TestClusterSharedLimit(t *testing.T) {
	cl := redistest.StartCluster(t)
	l := ratelimit.Limit{Rate: 10, Burst: 20}
	edit := func(c *Config) { c.Timeout = time.Second }
	var stores []*Store
	for range 3 {
		stores = append(stores, newTestStore(t, cl.Addrs(), edit, Options{}))
	}
	const tenants = 24
	var admitted [tenants][2]atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range 48 {
		wg.Go(func() {
			st := stores[w%3]
			for i := 0; time.Since(start) < 300*time.Millisecond; i++ {
				tn := (w + i) % tenants
				sc := i % 2
				k := ratelimit.BucketKey{Tenant: fmt.Sprintf("tenant-%d}{", tn), Scope: []string{"", "export"}[sc]}
				r, out, err := st.Decide(context.Background(), k, l, 1)
				if err != nil || out.Source == FromPolicy {
					t.Errorf("Decide(%v): %+v, %v", k, out, err)
					return
				}
				if r.Allowed {
					admitted[tn][sc].Add(1)
				}
			}
		})
	}
	wg.Wait()
	ceiling := l.Burst + l.Rate*time.Since(start).Seconds() + 1
	for tn := range admitted {
		for sc := range admitted[tn] {
			// No lower bound beyond 1: under -race a bucket may see fewer
			// than Burst attempts.
			if got := float64(admitted[tn][sc].Load()); got > ceiling || got < 1 {
				t.Errorf("tenant %d scope %d: admitted %v, want in [1, %.1f]", tn, sc, got, ceiling)
			}
		}
	}
	for _, srv := range cl.Servers {
		if n, err := srv.Do("DBSIZE"); err != nil || n == "0" {
			t.Errorf("node %s holds %s keys (%v); want buckets on every node", srv.Addr(), n, err)
		}
	}
	// Every scope of a hostile tenant hashes to the tenant's slot.
	for _, tn := range hostileTenants {
		want, _ := cl.Servers[0].Do("CLUSTER", "KEYSLOT", bucketKey(ratelimit.BucketKey{Tenant: tn}))
		got, _ := cl.Servers[0].Do("CLUSTER", "KEYSLOT", bucketKey(ratelimit.BucketKey{Tenant: tn, Scope: "{x}:y"}))
		if got != want || got == "" {
			t.Errorf("tenant %.20q: slots %q and %q differ", tn, want, got)
		}
	}
}

// TestClockSkew: instances whose clocks differ by 10 seconds share one
// bucket exactly, because the script reads Redis's clock.
func TestClockSkew(t *testing.T) {
	srv := redistest.StartServer(t)
	ahead := func() time.Time { return time.Now().Add(5 * time.Second) }
	behind := func() time.Time { return time.Now().Add(-5 * time.Second) }
	edit := func(c *Config) { c.Timeout = time.Second }
	a := newTestStore(t, []string{srv.Addr()}, edit, Options{Now: ahead})
	b := newTestStore(t, []string{srv.Addr()}, edit, Options{Now: behind})
	l := ratelimit.Limit{Rate: 1, Burst: 5}
	k := ratelimit.BucketKey{Tenant: "skew"}
	var got []bool
	for i := range 8 {
		st := a
		if i%2 == 1 {
			st = b
		}
		r, err := st.Take(context.Background(), k, l, 1)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.Allowed)
		if !r.Allowed && (r.RetryAfter <= 0 || r.RetryAfter > time.Second) {
			t.Errorf("take %d: RetryAfter %v, want in (0, 1s] whatever the local clock", i, r.RetryAfter)
		}
	}
	want := []bool{true, true, true, true, true, false, false, false}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("decisions = %v, want %v (one bucket of 5)", got, want)
	}
}

// TestScriptFlush: after SCRIPT FLUSH the next take succeeds (EVAL after
// NOSCRIPT), batched and not.
func TestScriptFlush(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, batched := range []bool{true, false} {
		s := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.Batch.Disabled = !batched; c.Timeout = time.Second }, Options{})
		for i := range 3 {
			if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
				t.Fatal(err)
			}
			_, out, err := s.Decide(context.Background(), ratelimit.BucketKey{Tenant: "flush"}, bigLimit, 1)
			if err != nil || out.Source != FromRedis {
				t.Errorf("batched=%v take %d after SCRIPT FLUSH: %+v, %v; want a Redis decision", batched, i, out, err)
			}
		}
	}
}

// TestDenialCache: 10,000 takes from a tenant over quota cost a handful of
// script calls.
func TestDenialCache(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.Timeout = time.Second }, Options{})
	l := ratelimit.Limit{Rate: 0.5, Burst: 5}
	k := ratelimit.BucketKey{Tenant: "noisy", Scope: "export"}
	before := scriptCalls(t, srv)
	var allowed, cached int
	for range 10_000 {
		r, out, err := s.Decide(context.Background(), k, l, 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.Allowed {
			allowed++
		}
		if out.Source == FromDenyCache {
			cached++
			if r.RetryAfter <= 0 || r.RetryAfter > 2*time.Second {
				t.Fatalf("cached denial RetryAfter = %v, want in (0, 2s]", r.RetryAfter)
			}
		}
	}
	calls := scriptCalls(t, srv) - before
	// Every key expires: this one when its bucket is full again (~10s).
	if ttl, err := srv.Do("PTTL", bucketKey(k)); err != nil || ttl == "-1" || ttl == "-2" || len(ttl) < 4 {
		t.Errorf("PTTL %s = %s, %v; want about 10000 ms", bucketKey(k), ttl, err)
	}
	if allowed != 5 || calls > 10 {
		t.Errorf("allowed %d (want 5), script calls %d (want <= 10), cached denials %d", allowed, calls, cached)
	}
}

// TestBatching: concurrent takes share pipelines; a lone take is a pipeline
// of one.
func TestBatching(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.Timeout = time.Second; c.Batch.MaxInFlight = 2 }, Options{})
	// Load the script first: the first take meets NOSCRIPT.
	if _, err := s.Take(context.Background(), ratelimit.BucketKey{Tenant: "warm"}, bigLimit, 1); err != nil {
		t.Fatal(err)
	}
	h := &pipelineCounter{}
	s.client.AddHook(h)
	if _, err := s.Take(context.Background(), ratelimit.BucketKey{Tenant: "one"}, bigLimit, 1); err != nil {
		t.Fatal(err)
	}
	if h.pipelines.Load() != 1 || h.pipelined.Load() != 1 {
		t.Fatalf("lone take: %d pipelines, %d commands; want 1, 1", h.pipelines.Load(), h.pipelined.Load())
	}
	var wg sync.WaitGroup
	for w := range 64 {
		wg.Go(func() {
			for i := range 200 {
				k := ratelimit.BucketKey{Tenant: fmt.Sprint(w), Scope: fmt.Sprint(i % 3)}
				if _, out, err := s.Decide(context.Background(), k, bigLimit, 1); err != nil || out.Source != FromRedis {
					t.Errorf("Decide: %+v, %v", out, err)
					return
				}
			}
		})
	}
	wg.Wait()
	p, c := h.pipelines.Load(), h.pipelined.Load()
	if c != 64*200+1 || float64(c)/float64(p) < 2 {
		t.Errorf("%d commands in %d pipelines; want %d commands, >= 2 a pipeline", c, p, 64*200+1)
	}
	t.Logf("%d takes in %d pipelines (%.1f a pipeline)", c, p, float64(c)/float64(p))
}

// TestKillRestart: Redis killed mid-traffic: no take waits past the
// deadline, the breaker opens and the policy decides; Redis restarted empty:
// decisions come from Redis again without intervention. Goroutines flat.
func TestKillRestart(t *testing.T) {
	base := runtime.NumGoroutine()
	srv := redistest.StartServer(t)
	for _, batched := range []bool{true, false} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			srv.Restart()
			var opened atomic.Bool
			var policies atomic.Int64
			o := Options{
				OnBreakerChange: func(_, to BreakerState) {
					if to == BreakerOpen {
						opened.Store(true)
					}
				},
				OnPolicy: func(p FailurePolicy, _ error) {
					if p == Local {
						policies.Add(1)
					}
				},
			}
			s := newTestStore(t, []string{srv.Addr()}, func(c *Config) {
				c.Batch.Disabled = !batched
				c.Breaker.OpenFor = 100 * time.Millisecond
				c.Instances = 2
			}, o)
			tr := startTraffic(t, 16, func(w, i int) (Outcome, error) {
				k := ratelimit.BucketKey{Tenant: fmt.Sprint(w % 4), Scope: fmt.Sprint(i % 5)}
				_, out, err := s.Decide(context.Background(), k, bigLimit, 1)
				return out, err
			})
			tr.waitFor("Redis decisions", func() bool { return tr.count(FromRedis) > 100 })
			// Under load on a shared machine a 5ms deadline is sometimes
			// missed and the breaker may have tripped already: count from
			// the kill.
			opened.Store(false)
			srv.Kill()
			policies.Store(0)
			tr.waitFor("the breaker to open", opened.Load)
			tr.waitFor("policy decisions", func() bool { return policies.Load() > 100 })
			srv.Restart()
			n := tr.count(FromRedis)
			tr.waitFor("Redis decisions after restart", func() bool { return tr.count(FromRedis) > n+100 })
			if d := tr.end(); d > 250*time.Millisecond {
				t.Errorf("slowest decision took %v, want < 250ms (deadline 5ms)", d)
			}
			t.Logf("redis %d, policy %d", tr.count(FromRedis), tr.count(FromPolicy))
		})
	}
	srv.Kill()
	checkGoroutines(t, base)
}

// TestStalledRedis: a Redis that stalls (CLIENT PAUSE) costs a deadline,
// not a hang; under FailClosed the error matches ErrUnavailable.
func TestStalledRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	for _, batched := range []bool{true, false} {
		s := newTestStore(t, []string{srv.Addr()}, func(c *Config) {
			c.Batch.Disabled = !batched
			c.FailurePolicy = FailClosed
		}, Options{})
		k := ratelimit.BucketKey{Tenant: "paused"}
		// Warm up (bounded): under -race a cold first call can miss the
		// 5 ms deadline this test is about.
		for deadline := time.Now().Add(5 * time.Second); ; {
			_, err := s.Take(context.Background(), k, bigLimit, 1)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond) // bounded by deadline
		}
		if _, err := srv.Do("CLIENT", "PAUSE", "400", "ALL"); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, out, err := s.Decide(context.Background(), k, bigLimit, 1)
		d := time.Since(start)
		var ue *UnavailableError
		if !errors.Is(err, ErrUnavailable) || !errors.As(err, &ue) || ue.RetryAfter != DefaultBreakerOpenFor {
			t.Errorf("batched=%v: err = %v, want an *UnavailableError", batched, err)
		}
		if out.Source != FromPolicy || !(errors.Is(out.Cause, context.DeadlineExceeded) || errors.Is(out.Cause, os.ErrDeadlineExceeded)) {
			t.Errorf("batched=%v: outcome %+v, want policy after a deadline", batched, out)
		}
		if d > 250*time.Millisecond {
			t.Errorf("batched=%v: took %v, want about the 5ms deadline", batched, d)
		}
		t.Logf("batched=%v: stalled take answered in %v", batched, d)
		if _, err := srv.Do("CLIENT", "UNPAUSE"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFailOpenAndClosed: with Redis down, fail_open admits and fail_closed
// rejects with ErrUnavailable; the breaker then answers without waiting.
func TestFailOpenAndClosed(t *testing.T) {
	srv := redistest.StartServer(t)
	addr := srv.Addr()
	srv.Kill()
	for _, p := range []FailurePolicy{FailOpen, FailClosed} {
		var n atomic.Int64
		s := newTestStore(t, []string{addr}, func(c *Config) { c.FailurePolicy = p }, Options{OnPolicy: func(FailurePolicy, error) { n.Add(1) }})
		for i := range 20 {
			r, out, err := s.Decide(context.Background(), ratelimit.BucketKey{Tenant: "x"}, bigLimit, 1)
			if out.Source != FromPolicy || out.Policy != p {
				t.Fatalf("%v take %d: outcome %+v", p, i, out)
			}
			if p == FailOpen && (err != nil || !r.Allowed || !r.StateUnknown || r.Remaining != 0) {
				t.Errorf("fail_open: %+v, %v; want allowed, the bucket state unknown", r, err)
			}
			if p == FailClosed && !errors.Is(err, ErrUnavailable) {
				t.Errorf("fail_closed: err %v, want ErrUnavailable", err)
			}
			if i == 19 && !errors.Is(out.Cause, ErrBreakerOpen) {
				t.Errorf("%v: cause %v after 20 failures, want ErrBreakerOpen", p, out.Cause)
			}
		}
		if n.Load() != 20 {
			t.Errorf("%v: OnPolicy called %d times, want 20", p, n.Load())
		}
	}
}

func TestInvalidTakeAndClose(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newTestStore(t, []string{srv.Addr()}, nil, Options{})
	k := ratelimit.BucketKey{Tenant: "x"}
	for _, c := range []struct {
		l    ratelimit.Limit
		cost float64
	}{{bigLimit, 0}, {bigLimit, -1}, {ratelimit.Limit{Rate: 0, Burst: 1}, 1}, {ratelimit.Limit{Rate: 1, Burst: 1}, nan()}} {
		if _, err := s.Take(context.Background(), k, c.l, c.cost); !errors.Is(err, ErrInvalidTake) {
			t.Errorf("Take(%v, %v) = %v, want ErrInvalidTake", c.l, c.cost, err)
		}
	}
	_ = s.Close()
	if _, err := s.Take(context.Background(), k, bigLimit, 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Take after Close = %v, want ErrClosed", err)
	}
}

func TestMain(m *testing.M) {
	// go-redis logs every failed dial through a package-level logger; the
	// fault tests fail thousands on purpose.
	redis.SetLogger(quietLogger{})
	os.Exit(m.Run())
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func nan() float64 { z := 0.0; return z / z }

// TestDenialCacheSingleFlight: 64 callers hammering one empty bucket
// refill by refill: when the cached denial expires, one of them asks Redis
// and the others wait for its answer, so Redis sees about one call per
// refilled token, not one per caller (up to 64 per expiry before).
func TestDenialCacheSingleFlight(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.Timeout = time.Second }, Options{})
	l := ratelimit.Limit{Rate: 5, Burst: 2}
	k := ratelimit.BucketKey{Tenant: "herd"}
	// Empty the bucket first: the very first takes find nothing cached.
	for range 3 {
		if _, err := s.Take(context.Background(), k, l, 1); err != nil {
			t.Fatal(err)
		}
	}
	before := scriptCalls(t, srv)
	admitted, elapsed := admitAll(t, []ratelimit.Store{s}, k, l, 64, time.Second)
	calls := scriptCalls(t, srv) - before
	want := l.Rate*elapsed.Seconds() + 1
	t.Logf("%d admitted, %d script calls in %v", admitted, calls, elapsed)
	if float64(admitted) > want+1 {
		t.Errorf("admitted %d, want <= %.1f", admitted, want+1)
	}
	if float64(calls) > 2*want+4 {
		t.Errorf("%d script calls for %d admissions, want <= %.0f (one per refill, not one per caller)", calls, admitted, 2*want+4)
	}
}
