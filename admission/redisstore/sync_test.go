package redisstore

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/redistest"
)

// syncFlood is one fleet in sync mode flooding one bucket: len(callers)
// instances of one Redis, callers[i] goroutines on instance i, each taking
// cost from l's bucket k as fast as a 50 µs pause lets it, for d.
type syncFlood struct {
	n        int
	interval time.Duration
	l        ratelimit.Limit
	cost     float64
	callers  []int
	d        time.Duration
}

// syncFloodResult is what a syncFlood's fleet admitted and was asked, in
// tokens, over elapsed, by instance, and its decisions by source.
type syncFloodResult struct {
	admitted, asked []float64
	elapsed         time.Duration
	sources         [4]int64
}

// total returns the sum of xs.
func total(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

// exact is what one exact bucket admits over r's run: the burst and the
// refill.
func (f syncFlood) exact(r syncFloodResult) float64 { return f.l.Burst + f.l.Rate*r.elapsed.Seconds() }

// bound is the most sync mode may admit over r's run: the exact answer and
// n × (rate × interval + cost) (see syncer).
func (f syncFlood) bound(r syncFloodResult) float64 {
	return f.exact(r) + float64(f.n)*(f.l.Rate*f.interval.Seconds()+f.cost)
}

func (f syncFlood) run(t *testing.T, srv *redistest.Server, k ratelimit.BucketKey) syncFloodResult {
	t.Helper()
	stores := make([]*Store, f.n)
	for i := range stores {
		stores[i] = newTestStore(t, []string{srv.Addr()}, func(c *Config) {
			c.Mode, c.SyncInterval, c.Instances = Sync, f.interval, f.n
			c.Timeout = 100 * time.Millisecond // this is about the bound, not timeouts
		}, Options{})
	}
	admitted, asked := make([]atomic.Int64, f.n), make([]atomic.Int64, f.n)
	var sources [4]atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for inst, c := range f.callers {
		for range c {
			wg.Go(func() {
				for time.Since(start) < f.d {
					r, out, err := stores[inst].Decide(context.Background(), k, f.l, f.cost)
					if err != nil {
						t.Errorf("Decide: %v", err)
						return
					}
					sources[out.Source].Add(1)
					asked[inst].Add(1)
					if r.Allowed {
						admitted[inst].Add(1)
					}
					time.Sleep(50 * time.Microsecond) // paced; still far above the quota
				}
			})
		}
	}
	wg.Wait()
	res := syncFloodResult{elapsed: time.Since(start), admitted: make([]float64, f.n), asked: make([]float64, f.n)}
	for i := range f.n {
		res.admitted[i] = f.cost * float64(admitted[i].Load())
		res.asked[i] = f.cost * float64(asked[i].Load())
	}
	for i := range sources {
		res.sources[i] = sources[i].Load()
	}
	return res
}

// TestSyncOverAdmission: three instances in sync mode share one tenant's
// bucket while it sends far more than its quota, unevenly (4, 2 and 1
// callers). The fleet admits at most the stated bound beyond what one
// exact bucket would (instances × (rate × sync_interval + cost)), and
// close to the quota: sync mode converges instead of multiplying it.
func TestSyncOverAdmission(t *testing.T) {
	srv := redistest.StartServer(t)
	f := syncFlood{n: 3, interval: 50 * time.Millisecond, l: ratelimit.Limit{Rate: 100, Burst: 20}, cost: 1,
		callers: []int{4, 2, 1}, d: 2 * time.Second}
	r := f.run(t, srv, ratelimit.BucketKey{Tenant: "spread"})
	got, exact, bound := total(r.admitted), f.exact(r), f.bound(r)
	t.Logf("asked %.0f (%.0f× the quota), admitted %.0f (by instance %v); exact %.0f, bound %.0f; %d synced decisions",
		total(r.asked), total(r.asked)/exact, got, r.admitted, exact, bound, r.sources[FromSync])
	if total(r.asked) < 10*exact {
		t.Fatalf("asked only %.0f, want at least 10× the quota (%.0f) for the test to mean anything", total(r.asked), 10*exact)
	}
	if got > bound {
		t.Errorf("admitted %.0f, above the bound %.0f (exact %.0f + %d × (rate × interval + cost))", got, bound, exact, f.n)
	}
	if got < 0.8*exact {
		t.Errorf("admitted %.0f, want at least 80%% of the exact %.0f", got, exact)
	}
	if p := r.sources[FromPolicy]; p > 0 {
		t.Errorf("%d decisions by the failure policy with Redis healthy", p)
	}
}

// TestSyncBoundProperty: for any rate, burst, fleet size, interval, cost
// and spread of the load over the instances, a flood admits at most the
// stated bound beyond the exact answer, however long it lasts. The first
// case is the one a debt capped at one burst failed: (instances − 1) ×
// rate × interval = 100 tokens against a burst of 20, so 80 tokens were
// forgiven every interval and the fleet admitted 2.5× the quota.
func TestSyncBoundProperty(t *testing.T) {
	srv := redistest.StartServer(t)
	cases := []syncFlood{{n: 3, interval: 50 * time.Millisecond, l: ratelimit.Limit{Rate: 1000, Burst: 20}, cost: 1,
		callers: []int{2, 2, 2}, d: time.Second}}
	rng := rand.New(rand.NewPCG(29, 2))
	logUniform := func(lo, hi float64) float64 { return math.Round(lo * math.Pow(hi/lo, rng.Float64())) }
	for len(cases) < 10 {
		f := syncFlood{n: 2 + rng.IntN(3), interval: []time.Duration{10, 20, 50, 100}[rng.IntN(4)] * time.Millisecond, d: 600 * time.Millisecond}
		f.l.Rate = logUniform(20, 2000)
		f.l.Burst = max(1, logUniform(1, 2*f.l.Rate))
		f.cost = 1
		if rng.IntN(2) == 0 {
			f.cost = float64(1 + rng.IntN(int(min(f.l.Burst, 10))))
		}
		f.callers = make([]int, f.n)
		f.callers[0] = 1 + rng.IntN(3)
		for i := 1; i < f.n; i++ {
			f.callers[i] = rng.IntN(4)
		}
		cases = append(cases, f)
	}
	for i, f := range cases {
		r := f.run(t, srv, ratelimit.BucketKey{Tenant: fmt.Sprint("property-", i)})
		got, exact, bound := total(r.admitted), f.exact(r), f.bound(r)
		desc := fmt.Sprintf("case %d: %d instances (callers %v), interval %v, rate %.0f, burst %.0f, cost %.0f", i, f.n, f.callers, f.interval, f.l.Rate, f.l.Burst, f.cost)
		t.Logf("%s: asked %.0f, admitted %.0f; exact %.0f, bound %.0f", desc, total(r.asked), got, exact, bound)
		// The slack is one cost and 5 ms of refill: the run's clock and
		// Redis's are read at slightly different instants.
		if got > bound+f.cost+0.005*f.l.Rate {
			t.Errorf("%s: admitted %.0f tokens, above the bound %.0f (exact %.0f)", desc, got, bound, exact)
		}
		if p := r.sources[FromPolicy]; p > 0 {
			t.Errorf("%s: %d decisions by the failure policy with Redis healthy", desc, p)
		}
	}
}

// TestSyncReloadKeepsTakes: a reload that changes a bucket's limit before
// the view pushed what it took still charges Redis with every take: an
// exact-mode instance on the same bucket then finds them gone. (When a
// reload replaced the view, its unpushed takes were dropped, and the
// exact instance found the bucket nearly full.)
func TestSyncReloadKeepsTakes(t *testing.T) {
	srv := redistest.StartServer(t)
	synced := newTestStore(t, []string{srv.Addr()}, func(c *Config) {
		c.Mode, c.SyncInterval = Sync, time.Hour // nothing pushed by the loop during the test
	}, Options{})
	exact := newTestStore(t, []string{srv.Addr()}, nil, Options{})
	k := ratelimit.BucketKey{Tenant: "reloaded"}
	before, after := ratelimit.Limit{Rate: 1, Burst: 100}, ratelimit.Limit{Rate: 1.5, Burst: 100}
	for i := range 50 {
		if r, _, err := synced.Decide(context.Background(), k, before, 1); err != nil || !r.Allowed {
			t.Fatalf("take %d under the old limit: %+v %v", i, r, err)
		}
	}
	if r, _, err := synced.Decide(context.Background(), k, after, 1); err != nil || !r.Allowed {
		t.Fatalf("take under the new limit: %+v %v", r, err)
	}
	// 49 tokens are left (and a little refill): 60 must be refused.
	r, out, err := exact.Decide(context.Background(), k, after, 60)
	if err != nil || out.Source != FromRedis {
		t.Fatalf("exact take: %+v %+v %v", r, out, err)
	}
	if r.Allowed {
		t.Errorf("60 tokens admitted from a bucket of 100 after 51 takes: the reload dropped the takes")
	}
}

// TestSyncRedisDiesAndReturns: Redis killed mid-traffic in sync mode: no
// decision errs or waits long; once the views are stale and their last
// interval's refill is spent, the failure policy decides; Redis restarted
// (empty): decisions come from the synced views again without
// intervention.
func TestSyncRedisDiesAndReturns(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newTestStore(t, []string{srv.Addr()}, func(c *Config) {
		c.Mode, c.Instances = Sync, 2
		c.Breaker.OpenFor = 100 * time.Millisecond
	}, Options{})
	// 8 callers at up to 5,000 a second each, over three tenants of
	// 1,000 a second: a stale view's refill (50 tokens an interval) is
	// soon spent.
	l := ratelimit.Limit{Rate: 1000, Burst: 1000}
	tr := startTraffic(t, 8, func(w, i int) (Outcome, error) {
		k := ratelimit.BucketKey{Tenant: []string{"a", "b", "c"}[(w+i)%3]}
		_, out, err := s.Decide(context.Background(), k, l, 1)
		return out, err
	})
	tr.waitFor("synced decisions", func() bool { return tr.count(FromSync) > 1000 })
	srv.Kill()
	tr.waitFor("policy decisions", func() bool { return tr.count(FromPolicy) > 500 })
	srv.Restart()
	n := tr.count(FromSync)
	tr.waitFor("synced decisions after the restart", func() bool { return tr.count(FromSync) > n+1000 })
	if d := tr.end(); d > 250*time.Millisecond {
		t.Errorf("slowest decision %v, want < 250ms", d)
	}
	t.Logf("synced %d, policy %d", tr.count(FromSync), tr.count(FromPolicy))
}

func TestModeText(t *testing.T) {
	var c Config
	if err := yaml.Unmarshal([]byte("mode: sync\nsync_interval: 20ms"), &c); err != nil || c.Mode != Sync || c.SyncInterval != 20*time.Millisecond {
		t.Errorf("mode: sync: %+v, %v", c, err)
	}
	if err := yaml.Unmarshal([]byte("mode: eventual"), &c); err == nil {
		t.Error("mode: eventual accepted")
	}
	for text, want := range map[string]BackstopMode{"": BackstopSync, "backstop_mode: sync": BackstopSync, "backstop_mode: exact": BackstopExact} {
		var c Config
		if err := yaml.Unmarshal([]byte(text), &c); err != nil || c.BackstopMode != want {
			t.Errorf("%q: backstop mode %v, %v; want %v", text, c.BackstopMode, err, want)
		}
	}
	if err := yaml.Unmarshal([]byte("backstop_mode: local"), &c); err == nil || !strings.Contains(err.Error(), "backstop_mode") {
		t.Errorf("backstop_mode: local: %v, want an error naming the field", err)
	}
	err := (&Config{Addrs: []string{"a:1"}, Mode: 7, SyncInterval: -1}).Validate()
	if err == nil || !strings.Contains(err.Error(), "redis.mode") || !strings.Contains(err.Error(), "redis.sync_interval") {
		t.Errorf("bad mode and interval: %v, want both named", err)
	}
}

// TestSyncTakeAll: in sync mode too a TakeAll is all or nothing: once the
// group's bucket is spent, the tenant's bucket is not charged, and the
// refusal says which bucket lacks tokens.
func TestSyncTakeAll(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.Mode = Sync }, Options{})
	ctx := context.Background()
	group := ratelimit.Take{Key: ratelimit.BucketKey{Tenant: "acme", Scope: "export"}, Limit: ratelimit.Limit{Rate: 0.1, Burst: 2}, Cost: 1}
	tenant := ratelimit.Take{Key: ratelimit.BucketKey{Tenant: "acme"}, Limit: ratelimit.Limit{Rate: 0.1, Burst: 100}, Cost: 1}
	for i := range 2 {
		if res, out, err := s.DecideAll(ctx, []ratelimit.Take{group, tenant}); err != nil || out.Source != FromSync || !res[0].Allowed || !res[1].Allowed {
			t.Fatalf("TakeAll %d: %+v %+v %v", i, res, out, err)
		}
	}
	for range 5 {
		res, out, err := s.DecideAll(ctx, []ratelimit.Take{group, tenant})
		if err != nil || out.Source != FromSync || res[0].Allowed || res[1].Allowed || res[0].RetryAfter <= 0 || res[1].RetryAfter != 0 {
			t.Fatalf("TakeAll with the group spent: %+v %+v %v", res, out, err)
		}
	}
	if r, _ := s.Take(ctx, tenant.Key, tenant.Limit, 1); !r.Allowed || r.Remaining < 96.9 || r.Remaining > 97.1 {
		t.Errorf("tenant bucket after 2 admissions, 5 refusals and this take: %+v, want 97 left", r)
	}
}

// TestReconciliationFailuresLeaveTheBreaker: while Redis is paused, every
// interval's reconciliation fails, but no decision asked Redis: the
// breaker, which is the decisions' judge of Redis, stays closed, and the
// takes are pushed once Redis is back. (While reconciliations went through
// the breaker, the fifth failed one opened it.)
func TestReconciliationFailuresLeaveTheBreaker(t *testing.T) {
	srv := redistest.StartServer(t)
	var opened atomic.Int64
	s := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.Mode = Sync },
		Options{OnBreakerChange: func(_, to BreakerState) {
			if to == BreakerOpen {
				opened.Add(1)
			}
		}})
	k := ratelimit.BucketKey{Tenant: "paused"}
	l := ratelimit.Limit{Rate: 1, Burst: 100}
	for range 10 {
		if r, out, err := s.Decide(context.Background(), k, l, 1); err != nil || !r.Allowed || out.Source != FromSync {
			t.Fatalf("take: %+v %+v %v", r, out, err)
		}
	}
	before := s.Stats()
	if _, err := srv.Do("CLIENT", "PAUSE", "500", "ALL"); err != nil {
		t.Fatal(err)
	}
	answered := func() uint64 { st := s.Stats(); return st.RoundTripsOK + st.RoundTripsSlow }
	paused := answered()
	// Five intervals' reconciliations fail against the pause (the breaker
	// opens at the fifth counted failure), then the first that succeeds
	// after it pushes the 10 takes.
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().RoundTripsFailed-before.RoundTripsFailed < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("%d reconciliations failed during the pause, want 5 for the test to mean anything", s.Stats().RoundTripsFailed-before.RoundTripsFailed)
		}
		time.Sleep(10 * time.Millisecond) // polling, bounded by deadline
	}
	for answered() == paused {
		if time.Now().After(deadline) {
			t.Fatal("no reconciliation succeeded within 5s of the pause")
		}
		time.Sleep(10 * time.Millisecond) // polling, bounded by deadline
	}
	if n := opened.Load(); n > 0 {
		t.Errorf("breaker opened %d times by reconciliations alone", n)
	}
	exact := newTestStore(t, []string{srv.Addr()}, nil, Options{})
	if r, out, err := exact.Decide(context.Background(), k, l, 91); err != nil || out.Source != FromRedis || r.Allowed {
		t.Errorf("91 of 100 tokens after 10 takes: %+v %+v %v; want refused by Redis (the takes pushed)", r, out, err)
	}
}

// TestSyncReconcilesWhatChanged: a bucket costs Redis one reconciliation
// per interval in which it was taken from, and none while idle. A tenant
// asking once every five intervals is reconciled once per take (when
// every view asked in the last two intervals was reconciled, two or three
// times), and not at all once it stops.
func TestSyncReconcilesWhatChanged(t *testing.T) {
	srv := redistest.StartServer(t)
	const interval = 20 * time.Millisecond
	s := newTestStore(t, []string{srv.Addr()}, func(c *Config) {
		c.Mode, c.SyncInterval, c.Heartbeat = Sync, interval, time.Hour // no heartbeats in the count
	}, Options{})
	k := ratelimit.BucketKey{Tenant: "seldom"}
	ctx := context.Background()
	if _, _, err := s.Decide(ctx, k, bigLimit, 1); err != nil { // the first take reconciles on the request path
		t.Fatal(err)
	}
	time.Sleep(3 * interval)
	before := scriptCalls(t, srv)
	const takes = 10
	for range takes {
		if _, _, err := s.Decide(ctx, k, bigLimit, 1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * interval)
	}
	busy := scriptCalls(t, srv) - before
	time.Sleep(10 * interval)
	idle := scriptCalls(t, srv) - before - busy
	t.Logf("%d takes, one every 5 intervals: %d reconciliations; then %d while idle for 10 intervals", takes, busy, idle)
	// A take late in an interval may be pushed in the next one, and a
	// tick may come late: one extra in all.
	if busy > takes+1 {
		t.Errorf("%d reconciliations for %d takes, want at most one each", busy, takes)
	}
	if idle > 0 {
		t.Errorf("%d reconciliations of an idle bucket", idle)
	}
}

// TestPerLimitMode: in an exact-mode store a limit may sync, and in a
// sync-mode store a limit may stay exact (ratelimit.Take.Mode): a tight
// daily quota exact, a per-second burst limit in process. One TakeAll of
// both stays all or nothing: a take the exact bucket refuses gives the
// synced bucket its tokens back, so after 8 requests of which the exact
// bucket (5 tokens) admits 5, the synced bucket (100) was charged 5.
func TestPerLimitMode(t *testing.T) {
	for _, storeMode := range []Mode{Exact, Sync} {
		t.Run(storeMode.String(), func(t *testing.T) {
			srv := redistest.StartServer(t)
			const interval = 20 * time.Millisecond
			// A long timeout: this is about the modes, not a loaded
			// machine's round trips.
			s := newTestStore(t, []string{srv.Addr()}, func(c *Config) {
				c.Mode, c.SyncInterval, c.Timeout = storeMode, interval, 100*time.Millisecond
			}, Options{})
			tenant := "per-limit-" + storeMode.String()
			daily := ratelimit.Take{Key: ratelimit.BucketKey{Tenant: tenant, Scope: "daily"}, Limit: ratelimit.Limit{Rate: 0.001, Burst: 5}, Cost: 1, Mode: ratelimit.ModeExact}
			burst := ratelimit.Take{Key: ratelimit.BucketKey{Tenant: tenant, Scope: "burst"}, Limit: ratelimit.Limit{Rate: 0.001, Burst: 100}, Cost: 1, Mode: ratelimit.ModeSync}
			ctx := context.Background()
			admitted := 0
			for i := range 8 {
				res, out, err := s.DecideAll(ctx, []ratelimit.Take{burst, daily})
				if err != nil {
					t.Fatal(err)
				}
				if out.Source == FromPolicy {
					t.Fatalf("request %d decided by the policy", i)
				}
				if res[0].Allowed != res[1].Allowed {
					t.Fatalf("request %d: not all or nothing: %+v", i, res)
				}
				if res[0].Allowed {
					admitted++
				}
			}
			if admitted != 5 {
				t.Errorf("admitted %d of 8, want 5 (the exact daily quota)", admitted)
			}
			// The synced bucket reaches Redis within an interval or two;
			// read it exactly: 95 tokens are left, not 92.
			time.Sleep(4 * interval)
			exact := newTestStore(t, []string{srv.Addr()}, nil, Options{})
			probe := burst
			probe.Mode, probe.Cost = ratelimit.ModeExact, 95
			if r, _, err := exact.Decide(ctx, probe.Key, probe.Limit, probe.Cost); err != nil || !r.Allowed {
				t.Errorf("95 tokens from the synced bucket after 5 admissions: %+v %v; the refused takes were charged", r, err)
			}
			if r, _, _ := exact.Decide(ctx, probe.Key, probe.Limit, 1); r.Allowed {
				t.Errorf("a 96th token from the synced bucket after 5 admissions: the admitted takes were not charged")
			}
			// The exact one's decisions went to Redis, the synced one's not:
			// 8 exact decisions (5 admitted, 3 refused, maybe cached).
			if st := s.Stats(); st.Sync < 8 {
				t.Errorf("stats %+v: want the synced bucket's 8 decisions in process", st)
			}
		})
	}
}
