package redisstore

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/redistest"
)

// TestSyncOverAdmission: three instances in sync mode share one tenant's
// bucket while it sends far more than its quota, unevenly (4, 2 and 1
// callers). The fleet admits at most the stated bound beyond what one
// exact bucket would (instances × (rate × sync_interval + cost)), and
// close to the quota: sync mode converges instead of multiplying it.
func TestSyncOverAdmission(t *testing.T) {
	srv := redistest.StartServer(t)
	const n = 3
	interval := 50 * time.Millisecond
	var stores []*Store
	for range n {
		stores = append(stores, newTestStore(t, []string{srv.Addr()}, func(c *Config) {
			c.Mode, c.SyncInterval, c.Instances = Sync, interval, n
			c.Timeout = 100 * time.Millisecond // this test is about the bound, not timeouts
		}, Options{}))
	}
	l := ratelimit.Limit{Rate: 100, Burst: 20}
	k := ratelimit.BucketKey{Tenant: "spread"}
	var admitted, asked [n]atomic.Int64
	var sources [4]atomic.Int64
	var wg sync.WaitGroup
	const d = 2 * time.Second
	start := time.Now()
	for _, inst := range []int{0, 0, 0, 0, 1, 1, 2} {
		wg.Go(func() {
			for time.Since(start) < d {
				r, out, err := stores[inst].Decide(context.Background(), k, l, 1)
				if err != nil {
					t.Errorf("Decide: %v", err)
					return
				}
				sources[out.Source].Add(1)
				asked[inst].Add(1)
				if r.Allowed {
					admitted[inst].Add(1)
				}
				time.Sleep(200 * time.Microsecond) // paced; still far above the quota
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	var total, demand int64
	for i := range n {
		total += admitted[i].Load()
		demand += asked[i].Load()
	}
	exact := l.Burst + l.Rate*elapsed.Seconds()
	bound := exact + n*(l.Rate*interval.Seconds()+1)
	t.Logf("asked %d (%.0f× the quota), admitted %d (by instance %d %d %d); exact %.0f, bound %.0f; %d synced decisions",
		demand, float64(demand)/exact, total, admitted[0].Load(), admitted[1].Load(), admitted[2].Load(), exact, bound, sources[FromSync].Load())
	if float64(demand) < 10*exact {
		t.Fatalf("asked only %d, want at least 10× the quota (%.0f) for the test to mean anything", demand, 10*exact)
	}
	if float64(total) > bound {
		t.Errorf("admitted %d, above the bound %.0f (exact %.0f + %d × (rate × interval + cost))", total, bound, exact, n)
	}
	if float64(total) < 0.8*exact {
		t.Errorf("admitted %d, want at least 80%% of the exact %.0f", total, exact)
	}
	if p := sources[FromPolicy].Load(); p > 0 {
		t.Errorf("%d decisions by the failure policy with Redis healthy", p)
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
