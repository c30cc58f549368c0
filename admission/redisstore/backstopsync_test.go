package redisstore

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/fairshare"
	"github.com/fairgate/fairgate/internal/redistest"
)

// TestSyncBackstopSharedByInstances: in sync mode three instances keep one
// fair backstop, decided in process: a heavy tenant flooding through all
// three is held to about the rate (within the buckets' bound of sync
// mode), and a light tenant asking through one of them is never refused.
// Negative control: a first-come bucket, synced the same way, refuses the
// light tenant.
func TestSyncBackstopSharedByInstances(t *testing.T) {
	srv := redistest.StartServer(t)
	const interval = 20 * time.Millisecond
	var stores []*Store
	for range 3 {
		stores = append(stores, newTestStore(t, []string{srv.Addr()}, func(c *Config) {
			c.Mode, c.SyncInterval, c.Timeout = Sync, interval, 100*time.Millisecond
		}, Options{}))
	}
	waitForCount(t, 3, "three instances", stores...)
	l := fairshare.BackstopLimit{Rate: 100, Burst: 50, Window: 200 * time.Millisecond}
	fair := func(st *Store, tenant string) (bool, error) {
		r, err := st.TakeBackstop(context.Background(), l, fairshare.BackstopRequest{Tenant: tenant, Weight: 1, Cost: 1})
		if tenant == "light" && !r.Allowed {
			t.Logf("light refused: %+v", r)
		}
		return r.Allowed, err
	}
	heavy, light, refused, elapsed := squeeze(t, stores, fair)
	// The bucket's bound (burst, the reserve, the rate) and sync mode's.
	ceiling := 2*l.Burst + l.Rate*elapsed.Seconds() + 3*(l.Rate*interval.Seconds()+1) + 1
	t.Logf("heavy %d, light %d (refused %d) in %v; ceiling %.0f", heavy, light, refused, elapsed, ceiling)
	if float64(heavy+light) > ceiling {
		t.Errorf("admitted %d + %d tokens in %v, want ≤ %.0f", heavy, light, elapsed, ceiling)
	}
	if float64(heavy) < 0.5*l.Rate*elapsed.Seconds() {
		t.Errorf("heavy admitted %d in %v: the backstop is not work-conserving", heavy, elapsed)
	}
	if refused > 0 || light == 0 {
		t.Errorf("light tenant: %d admitted, %d refused; want none refused", light, refused)
	}
	for i, s := range stores {
		if p := s.Stats().Policy; p > 0 {
			t.Errorf("instance %d: %d decisions by the failure policy with Redis healthy", i, p)
		}
	}
	firstComeControl(t, stores, l)
}

// TestSyncBackstopOffTheRequestPath: with the backstop in use, sync mode
// calls Redis once per bucket in use per instance per interval, whatever
// the decisions: 100 tenants asking the backstop and their own buckets
// thousands of times a second cost at most (buckets + the backstop's
// shard) script calls per interval, and the membership's heartbeats.
func TestSyncBackstopOffTheRequestPath(t *testing.T) {
	srv := redistest.StartServer(t)
	const interval = 50 * time.Millisecond
	l := fairshare.BackstopLimit{Rate: 1e6, Burst: 1e6, Window: time.Second}
	const tenants = 100
	ctx := context.Background()
	// run drives s for d and returns its decisions and the script calls
	// Redis ran meanwhile.
	run := func(s *Store, d time.Duration, buckets bool) (decisions int64, calls int, elapsed time.Duration) {
		before := scriptCalls(t, srv)
		var n atomic.Int64
		start := time.Now()
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := w; time.Since(start) < d; i += 4 {
					id := fmt.Sprint("t-", i%tenants)
					if _, err := s.TakeBackstop(ctx, l, fairshare.BackstopRequest{Tenant: id, Weight: 1, Cost: 1}); err != nil {
						t.Errorf("TakeBackstop: %v", err)
						return
					}
					if !buckets {
						n.Add(1)
						continue
					}
					if _, _, err := s.Decide(ctx, ratelimit.BucketKey{Tenant: id}, bigLimit, 1); err != nil {
						t.Errorf("Decide: %v", err)
						return
					}
					n.Add(1)
				}
			})
		}
		wg.Wait()
		return n.Load(), scriptCalls(t, srv) - before, time.Since(start)
	}
	// A long timeout: the first takes reconcile on the request path, and
	// this is about the calls, not about a loaded machine's round trips.
	s := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.Mode, c.SyncInterval, c.Timeout = Sync, interval, 100*time.Millisecond }, Options{})
	decisions, calls, elapsed := run(s, time.Second, true)
	intervals := float64(elapsed)/float64(interval) + 2
	// Buckets in use: the tenants', and one shard of the backstop; each
	// first take reconciles once on the request path; a heartbeat a second.
	most := int((tenants+1)*intervals) + tenants + 1 + int(elapsed/time.Second) + 2
	t.Logf("%d decisions (each a backstop take and a bucket take) in %v: %d script calls, at most %d allowed",
		decisions, elapsed.Round(time.Millisecond), calls, most)
	if calls > most {
		t.Errorf("%d script calls for %d decisions over %.0f intervals, want ≤ %d", calls, decisions, intervals, most)
	}
	if st := s.Stats(); st.Policy > 0 || st.Redis > 0 {
		t.Errorf("decisions by Redis %d and by the policy %d, want 0 and 0 in sync mode with Redis healthy", st.Redis, st.Policy)
	}
	// Exact mode's buckets keep the synced backstop: its shard is
	// reconciled once an interval, whatever the decisions.
	_ = s.Close() // its calls are not exact mode's
	exact := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.SyncInterval, c.Timeout = interval, 100*time.Millisecond }, Options{})
	decisions, calls, elapsed = run(exact, 500*time.Millisecond, false)
	// The shard's reconciliations (the first on the request path), a
	// join, and a heartbeat a second (one more at a second's edge).
	most = int(float64(elapsed)/float64(interval)+2) + 1 + 1 + int(elapsed/time.Second) + 2
	t.Logf("exact mode: %d backstop decisions in %v: %d script calls, at most %d allowed", decisions, elapsed.Round(time.Millisecond), calls, most)
	if calls > most {
		t.Errorf("exact mode: %d script calls for %d backstop decisions, want ≤ %d", calls, decisions, most)
	}
	// Negative control: the exact backstop is a script call a decision.
	control := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.Mode, c.BackstopMode = Sync, BackstopExact }, Options{})
	if decisions, calls, _ := run(control, 200*time.Millisecond, false); int64(calls) < decisions {
		t.Errorf("negative control: the exact backstop made %d script calls for %d decisions, want one or more each", calls, decisions)
	}
}

// TestSyncBackstopCluster: on a 3-master cluster the backstop has a shard
// on each master, and each master gets its share of the backstop's
// traffic (no key takes more than a third). With one master stopped, the
// backstop keeps deciding on the other shards and on a local part of the
// stopped one's: no backstop decision goes to the failure policy, and a
// light tenant of the stopped master's shard is still admitted beside a
// flood. Negative control: the exact backstop (BackstopExact), one hash
// on the stopped master, sends every backstop decision to the failure
// policy.
func TestSyncBackstopCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	const interval = 20 * time.Millisecond
	s := newTestStore(t, cl.Addrs(), func(c *Config) {
		c.Mode, c.SyncInterval, c.FailurePolicy = Sync, interval, FailClosed
	}, Options{})
	ctx := context.Background()
	l := fairshare.BackstopLimit{Rate: 200, Burst: 100, Window: 200 * time.Millisecond}
	take := func(tenant string) (bool, error) {
		r, err := s.TakeBackstop(ctx, l, fairshare.BackstopRequest{Tenant: tenant, Weight: 1, Cost: 1})
		return r.Allowed, err
	}
	if _, err := take("first"); err != nil {
		t.Fatal(err)
	}
	b := s.syncer.syncedBackstop(ctx)
	masters := map[string]bool{}
	for i := range b.shards {
		// Only the keys, fixed at birth: the rest of a shard is the
		// reconciliation's, under b.mu.
		node, err := s.cluster.MasterForKey(ctx, b.shards[i].bucket)
		if err != nil {
			t.Fatal(err)
		}
		masters[node.Options().Addr] = true
	}
	if len(b.shards) != 3 || len(masters) != 3 {
		t.Fatalf("%d shards on %d masters, want 3 on 3", len(b.shards), len(masters))
	}
	evalsOf := func(addr string) float64 {
		return commandStat(t, addr, "evalsha", "calls") + commandStat(t, addr, "eval", "calls")
	}
	var before []float64
	for _, a := range cl.Addrs() {
		before = append(before, evalsOf(a))
	}
	// flood squeezes the backstop: a heavy tenant, and lightID as the
	// light one.
	flood := func(lightID string) (light, refused int) {
		_, light, refused, _ = squeeze(t, []*Store{s}, func(_ *Store, tenant string) (bool, error) {
			if tenant == "light" {
				tenant = lightID
			}
			return take(tenant)
		})
		return light, refused
	}
	flood("light")
	var total float64
	var per []float64
	for i, a := range cl.Addrs() {
		per = append(per, evalsOf(a)-before[i])
		total += per[i]
	}
	t.Logf("script calls by master over 600 ms: %v", per)
	for i, n := range per {
		// Reconciliations only (the backstop's and the heartbeat's on
		// one master): a third each, give or take the heartbeat and the
		// first calls.
		if n > total/3+10 {
			t.Errorf("master %d took %.0f of %.0f script calls, more than a third", i, n, total)
		}
	}

	exact := newTestStore(t, cl.Addrs(), func(c *Config) { c.FailurePolicy, c.BackstopMode = FailClosed, BackstopExact }, Options{})
	if _, err := exact.TakeBackstop(ctx, l, fairshare.BackstopRequest{Tenant: "first", Weight: 1, Cost: 1}); err != nil {
		t.Fatal(err)
	}
	hot, err := s.cluster.MasterForKey(ctx, backstopKey)
	if err != nil {
		t.Fatal(err)
	}
	for _, srv := range cl.Servers {
		if srv.Addr() == hot.Options().Addr {
			srv.Kill()
		}
	}
	// The light tenant's shard is on the stopped master: its fleet rates
	// are as last seen, and its part of the bucket local.
	lightID := ""
	for i := 0; lightID == ""; i++ {
		id := fmt.Sprint("light-", i)
		node, err := s.cluster.MasterForKey(ctx, b.shards[b.shardOf(id)].bucket)
		if err != nil {
			t.Fatal(err)
		}
		if node.Options().Addr == hot.Options().Addr {
			lightID = id
		}
	}
	light, refused := flood(lightID)
	st := s.Stats()
	t.Logf("one master stopped: light admitted %d, refused %d; policy decisions %d", light, refused, st.Policy)
	if st.Policy > 0 {
		t.Errorf("%d backstop decisions by the failure policy with one master of three stopped, want 0", st.Policy)
	}
	if light == 0 || refused > 0 {
		t.Errorf("light tenant with one master stopped: %d admitted, %d refused; want none refused", light, refused)
	}
	failed := 0
	for range 20 {
		if _, err := exact.TakeBackstop(ctx, l, fairshare.BackstopRequest{Tenant: "light", Weight: 1, Cost: 1}); err != nil {
			failed++
		}
	}
	if failed < 20 {
		t.Errorf("negative control: the exact backstop answered %d of 20 with its master stopped", 20-failed)
	}
}

// backstopCase is one fleet in sync mode at the fair backstop: a heavy
// tenant flooding through every instance and light ones, each asking
// through one instance at a fraction of an even split of the shared rate,
// well within its fair share.
type backstopCase struct {
	n        int
	interval time.Duration
	l        fairshare.BackstopLimit
	heavy    float64 // the heavy tenant's weight
	lights   []backstopLight
	d        time.Duration
}

type backstopLight struct {
	weight, cost float64
	every        time.Duration // between requests
	instance     int
}

// run runs c on fresh stores of srv through take and returns the light
// tenants' refusals after two windows, what was admitted in all and the
// run's length.
func (c backstopCase) run(t *testing.T, srv *redistest.Server, prefix string,
	take func(s *Store, l fairshare.BackstopLimit, r fairshare.BackstopRequest) (bool, error)) (refused []string, admitted float64, elapsed time.Duration) {
	// Each run on a Redis of its own: the backstop's keys are the same
	// whatever the tenants.
	if _, err := srv.Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	stores := make([]*Store, c.n)
	defer func() {
		for _, s := range stores {
			_ = s.Close()
		}
	}()
	for i := range stores {
		stores[i] = newTestStore(t, []string{srv.Addr()}, func(cfg *Config) {
			cfg.Mode, cfg.SyncInterval, cfg.Timeout, cfg.Instances = Sync, c.interval, 100*time.Millisecond, c.n
		}, Options{})
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	warm := 2 * c.l.Window
	ask := func(s *Store, r fairshare.BackstopRequest) bool {
		ok, err := take(s, c.l, r)
		if err != nil {
			t.Errorf("%s: %v", r.Tenant, err)
			return false
		}
		if ok {
			mu.Lock()
			admitted += r.Cost
			mu.Unlock()
		}
		return ok
	}
	for w := range 4 {
		wg.Go(func() {
			r := fairshare.BackstopRequest{Tenant: prefix + "heavy", Weight: c.heavy, Cost: 1}
			for time.Since(start) < c.d {
				ask(stores[w%c.n], r)
				time.Sleep(100 * time.Microsecond)
			}
		})
	}
	for i, lt := range c.lights {
		wg.Go(func() {
			r := fairshare.BackstopRequest{Tenant: fmt.Sprint(prefix, "light-", i), Weight: lt.weight, Cost: lt.cost}
			for next := time.Now(); next.Sub(start) < c.d; next = next.Add(lt.every) {
				time.Sleep(time.Until(next))
				if !ask(stores[lt.instance], r) && time.Since(start) > warm {
					mu.Lock()
					refused = append(refused, fmt.Sprintf("%s at %v", r.Tenant, time.Since(start).Round(time.Millisecond)))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return refused, admitted, time.Since(start)
}

// TestSyncBackstopProperty: for random fleets, rates, bursts, windows,
// intervals, weights and costs, sync mode's backstop keeps the invariant of
// fairshare.Backstop's property test (no tenant within its share is
// refused while another is above its own: here the light tenants are
// within theirs, the heavy one far above), and the fleet admits at most the
// bucket's bound (the burst, the reserve, the rate) and sync mode's,
// n × (rate × interval + cost). Negative control: the same runs on a
// first-come bucket, synced the same way, refuse light tenants.
func TestSyncBackstopProperty(t *testing.T) {
	srv := redistest.StartServer(t)
	rng := rand.New(rand.NewPCG(29, 3))
	var cases []backstopCase
	for range 6 {
		c := backstopCase{n: 2 + rng.IntN(3), interval: []time.Duration{10, 20, 50}[rng.IntN(3)] * time.Millisecond, d: 800 * time.Millisecond}
		c.l.Rate = 100 + float64(rng.IntN(300))
		c.l.Burst = math.Round(c.l.Rate * (0.3 + 1.2*rng.Float64()))
		c.l.Window = []time.Duration{200, 300}[rng.IntN(2)] * time.Millisecond
		c.heavy = 0.5 + 2.5*rng.Float64()
		weights := c.heavy
		for range 1 + rng.IntN(3) {
			lt := backstopLight{weight: 0.5 + 2.5*rng.Float64(), cost: float64(1 + rng.IntN(5)), instance: rng.IntN(c.n)}
			c.lights = append(c.lights, lt)
			weights += lt.weight
		}
		for i := range c.lights {
			lt := &c.lights[i]
			even := fairshare.ShareOf * c.l.Rate * lt.weight / weights // tokens a second
			rate := (0.1 + 0.3*rng.Float64()) * even / lt.cost         // requests a second
			lt.every = time.Duration(float64(time.Second) / rate)
		}
		cases = append(cases, c)
	}
	fair := func(s *Store, l fairshare.BackstopLimit, r fairshare.BackstopRequest) (bool, error) {
		res, err := s.TakeBackstop(context.Background(), l, r)
		return res.Allowed, err
	}
	for i, c := range cases {
		refused, admitted, elapsed := c.run(t, srv, fmt.Sprint("case-", i, "-"), fair)
		maxCost := 1.0
		for _, lt := range c.lights {
			maxCost = max(maxCost, lt.cost)
		}
		ceiling := 2*c.l.Burst + c.l.Rate*elapsed.Seconds() + float64(c.n)*(c.l.Rate*c.interval.Seconds()+maxCost) + maxCost
		desc := fmt.Sprintf("case %d: %d instances, interval %v, %+v, heavy weight %.1f, lights %+v", i, c.n, c.interval, c.l, c.heavy, c.lights)
		t.Logf("%s: admitted %.0f (ceiling %.0f), light refusals %d", desc, admitted, ceiling, len(refused))
		if len(refused) > 0 {
			t.Errorf("%s: light tenants refused within their shares: %v", desc, refused)
		}
		if admitted > ceiling {
			t.Errorf("%s: admitted %.0f tokens, above %.0f", desc, admitted, ceiling)
		}
		if floor := 0.8 * (c.l.Burst + c.l.Rate*elapsed.Seconds()); admitted < floor {
			t.Errorf("%s: admitted %.0f tokens, below %.0f: the flood should take what the light tenants leave", desc, admitted, floor)
		}
	}
	firstCome := func(s *Store, l fairshare.BackstopLimit, r fairshare.BackstopRequest) (bool, error) {
		res, err := s.Take(context.Background(), ratelimit.BucketKey{Scope: "first-come"}, limitOf(l), r.Cost)
		return res.Allowed, err
	}
	broken := 0
	for i, c := range cases[:3] {
		if refused, _, _ := c.run(t, srv, fmt.Sprint("control-", i, "-"), firstCome); len(refused) > 0 {
			broken++
		}
	}
	t.Logf("negative control: a first-come bucket refused light tenants in %d of 3 cases", broken)
	if broken == 0 {
		t.Error("negative control: a first-come bucket refused no light tenant in three cases; the runs cannot tell fair from unfair")
	}
}

// BenchmarkSyncBackstopTake is sync mode's backstop decision: in process,
// on one instance's part, 1,000 tenants, reconciled in the background.
func BenchmarkSyncBackstopTake(b *testing.B) {
	srv := redistest.StartServer(b)
	s := newTestStore(b, []string{srv.Addr()}, func(c *Config) { c.Mode = Sync }, Options{})
	ctx := context.Background()
	l := fairshare.BackstopLimit{Rate: 1e9, Burst: 1e9, Window: time.Second}
	reqs := make([]fairshare.BackstopRequest, 1000)
	for i := range reqs {
		reqs[i] = fairshare.BackstopRequest{Tenant: fmt.Sprint("tenant-", i), Weight: 1, Cost: 1}
		if _, err := s.TakeBackstop(ctx, l, reqs[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := s.TakeBackstop(ctx, l, reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
	}
}
