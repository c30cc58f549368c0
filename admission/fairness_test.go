package admission

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fairgate/fairgate/bulkhead"
	"github.com/fairgate/fairgate/shed"
	"github.com/fairgate/fairgate/tenant"
)

// simLoad is one stream of requests in a pool simulation: a request of
// route path with key every period, each holding its seat for service.
type simLoad struct {
	name, key, path string
	every, service  time.Duration
}

// simCount is what became of one stream's requests.
type simCount struct {
	sent, ok int
	by       map[string]int // rejections by layer/reason
}

func (c *simCount) share() float64 { return float64(c.ok) / float64(max(c.sent, 1)) }

// simulate runs loads through g for dur in a synctest bubble (fake time:
// the same every run) and counts outcomes per stream.
func simulate(t *testing.T, g *Gate, loads []simLoad, dur time.Duration) map[string]*simCount {
	t.Helper()
	out := map[string]*simCount{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for _, l := range loads {
		c := &simCount{by: map[string]int{}}
		out[l.name] = c
		wg.Go(func() {
			tick := time.NewTicker(l.every)
			defer tick.Stop()
			for time.Since(start) < dur {
				<-tick.C
				wg.Go(func() {
					d, err := g.Check(context.Background(), req(l.key, "GET", l.path))
					if err != nil {
						t.Error(err)
						return
					}
					started := serveFor(d, l.service)
					mu.Lock()
					defer mu.Unlock()
					c.sent++
					switch {
					case started:
						c.ok++
					case d.Allowed:
						c.by[LayerAdaptive.String()+"/"+ReasonLimitReached.String()]++
					default:
						c.by[d.Layer.String()+"/"+d.Reason.String()]++
					}
				})
			}
		})
	}
	wg.Wait()
	return out
}

// serveFor plays an admitted request's upstream call: its seat held for
// service, then released. A rejected request holds nothing. It reports
// whether the call started (the adaptive limit let it).
func serveFor(d Decision, service time.Duration) bool {
	if !d.Allowed {
		return false
	}
	lease := d.Lease()
	started := lease.StartUpstream(context.Background())
	if started {
		time.Sleep(service)
		lease.Answered()
	}
	lease.Release()
	return started
}

// poolGate is a gate over one tier's pool of 4 seats, shared by the tenants
// of tiers (all in pool "p"), with shedding on.
func poolGate(t *testing.T, tiers map[string]tenant.TierConfig, tenants []tenant.TenantConfig, routes []RouteConfig, off gateRule) *Gate {
	t.Helper()
	for name, tc := range tiers {
		tc.Pool = "p"
		tiers[name] = tc
	}
	reg, err := tenant.NewRegistry(tenant.Config{Tiers: tiers, Tenants: tenants})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Routes: routes,
		Bulkhead: &bulkhead.Config{Total: 4, Pools: map[string]bulkhead.PoolConfig{
			"p": {Share: 1, QueueLength: 16, MaxWait: time.Second}}},
		Shedding: &shed.SheddingConfig{CalibrationInterval: time.Second},
	}
	return newGateWithout(t, cfg, reg, Options{Now: time.Now}, off)
}

// sameTier is issue 11's second situation: two tenants of one tier share
// its pool; loud floods default-criticality searches inside its rate quota
// (about 2.5 times the pool's seats), quiet sends one every 200 ms.
func sameTier(t *testing.T, blind bool) map[string]*simCount {
	tiers := map[string]tenant.TierConfig{"pro": {Rate: 1e6, Burst: 1e6}}
	tenants := []tenant.TenantConfig{
		{ID: "loud", Tier: "pro", APIKeysSHA256: []string{tenant.HashKey("loud-key")}},
		{ID: "quiet", Tier: "pro", APIKeysSHA256: []string{tenant.HashKey("quiet-key")}},
	}
	g := poolGate(t, tiers, tenants, []RouteConfig{{Method: "GET", Path: "/search", Cost: 2}}, offIf(blind, shedByShare))
	return simulate(t, g, []simLoad{
		{name: "loud", key: "loud-key", path: "/search", every: 5 * time.Millisecond, service: 50 * time.Millisecond},
		{name: "quiet", key: "quiet-key", path: "/search", every: 200 * time.Millisecond, service: 50 * time.Millisecond},
	}, 20*time.Second)
}

func TestSameTierFloodDoesNotShedTheQuietTenant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := sameTier(t, false)
		t.Logf("loud %+v, quiet %+v", *got["loud"], *got["quiet"])
		if got["quiet"].share() < 0.99 {
			t.Errorf("quiet tenant admitted %.1f%% (%v), want ≥ 99%%", 100*got["quiet"].share(), got["quiet"].by)
		}
		if got["loud"].by["shed/priority"] == 0 {
			t.Errorf("the loud tenant was never shed (%v): the pool was not overloaded", got["loud"].by)
		}
	})
}

// Negative control: shedding that sees only priorities sheds the quiet
// tenant with the loud one.
func TestSameTierFloodShareBlindShedsTheQuietTenant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := sameTier(t, true)
		t.Logf("loud %+v, quiet %+v", *got["loud"], *got["quiet"])
		if got["quiet"].share() >= 0.99 {
			t.Errorf("share-blind shedding: quiet admitted %.1f%%; the test above cannot fail", 100*got["quiet"].share())
		}
	})
}

// ownExports is issue 11's third situation, within one tenant: its own
// sheddable exports (300 ms each, twice what its cap of 4 can run) fill
// its cap and queue, while its critical reads must still get through.
func ownExports(t *testing.T, reserve int) map[string]*simCount {
	tiers := map[string]tenant.TierConfig{"ent": {Rate: 1e6, Burst: 1e6, MaxConcurrent: 4, CriticalReservePercent: &reserve}}
	tenants := []tenant.TenantConfig{{ID: "acme", Tier: "ent", APIKeysSHA256: []string{tenant.HashKey("acme-key")}}}
	g := poolGate(t, tiers, tenants, []RouteConfig{
		{Method: "GET", Path: "/me", Cost: 1, Criticality: shed.Critical},
		{Method: "GET", Path: "/export", Cost: 10, Criticality: shed.Sheddable},
	}, 0)
	return simulate(t, g, []simLoad{
		{name: "exports", key: "acme-key", path: "/export", every: 40 * time.Millisecond, service: 300 * time.Millisecond},
		{name: "critical", key: "acme-key", path: "/me", every: 50 * time.Millisecond, service: 10 * time.Millisecond},
	}, 20*time.Second)
}

func TestOwnExportsDoNotLockOutCriticalReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := ownExports(t, tenant.DefaultCriticalReservePercent)
		t.Logf("exports %+v, critical %+v", *got["exports"], *got["critical"])
		if got["critical"].share() < 0.99 {
			t.Errorf("critical reads admitted %.1f%% (%v), want ≥ 99%%", 100*got["critical"].share(), got["critical"].by)
		}
		if got["exports"].ok == 0 || got["exports"].share() > 0.9 {
			t.Errorf("exports admitted %.1f%%: the cap was not reached", 100*got["exports"].share())
		}
	})
}

// Negative control: with no critical reserve, the tenant's exports take
// every slot and its critical reads are refused.
func TestOwnExportsWithoutReserveLockOutCriticalReads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := ownExports(t, 0)
		t.Logf("exports %+v, critical %+v", *got["exports"], *got["critical"])
		if got["critical"].share() >= 0.99 {
			t.Errorf("no reserve: critical admitted %.1f%%; the test above cannot fail", 100*got["critical"].share())
		}
	})
}

// twoPools is a gate whose upstream (4 seats) is shared by pool "a" (3
// seats) and pool "b" (1 seat, which "a" may not borrow): tenant alpha in
// a floods default searches; tenant beta in b sends sheddable exports at
// twice b's seat. noFloor turns the pools' shedding together off.
func twoPools(t *testing.T, noFloor bool) (map[string]*simCount, *Gate) {
	reg, err := tenant.NewRegistry(tenant.Config{
		Tiers: map[string]tenant.TierConfig{
			"gold":   {Rate: 1e6, Burst: 1e6, Pool: "a"},
			"bronze": {Rate: 1e6, Burst: 1e6, Pool: "b"},
		},
		Tenants: []tenant.TenantConfig{
			{ID: "alpha", Tier: "gold", APIKeysSHA256: []string{tenant.HashKey("alpha-key")}},
			{ID: "beta", Tier: "bronze", APIKeysSHA256: []string{tenant.HashKey("beta-key")}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Routes: []RouteConfig{
			{Method: "GET", Path: "/search", Cost: 2},
			{Method: "GET", Path: "/export", Cost: 10, Criticality: shed.Sheddable},
		},
		Bulkhead: &bulkhead.Config{Total: 4, Pools: map[string]bulkhead.PoolConfig{
			"a": {Share: 3, BorrowingPercent: 100, QueueLength: 16, MaxWait: time.Second},
			"b": {Share: 1, LendablePercent: 100, QueueLength: 4, MaxWait: time.Second}}},
		Shedding: &shed.SheddingConfig{CalibrationInterval: time.Second},
	}
	g := newGateWithout(t, cfg, reg, Options{Now: time.Now}, offIf(noFloor, shedTogether))
	return simulate(t, g, []simLoad{
		{name: "alpha", key: "alpha-key", path: "/search", every: 5 * time.Millisecond, service: 50 * time.Millisecond},
		{name: "beta", key: "beta-key", path: "/export", every: 10 * time.Millisecond, service: 100 * time.Millisecond},
	}, 20*time.Second), g
}

// When the upstream is the bottleneck and pool a sheds default requests,
// pool b admits no sheddable export of a tenant above its share there: b's
// seat goes back to a's default searches. (Beta's exports are still
// admitted while beta is within its share of b: fairness comes first.)
// The negative control is the same traffic with each pool shedding alone.
func TestPoolsShedTogether(t *testing.T) {
	var together, apart map[string]*simCount
	synctest.Test(t, func(t *testing.T) { together, _ = twoPools(t, false) })
	synctest.Test(t, func(t *testing.T) { apart, _ = twoPools(t, true) })
	t.Logf("together: alpha %+v, beta %+v", *together["alpha"], *together["beta"])
	t.Logf("apart:    alpha %+v, beta %+v", *apart["alpha"], *apart["beta"])
	if together["alpha"].by["shed/priority"] == 0 {
		t.Fatalf("pool a shed nothing: %v", together["alpha"].by)
	}
	if b, a := together["beta"].ok, apart["beta"].ok; float64(b) > 0.7*float64(a) {
		t.Errorf("beta's sheddable exports admitted: %d shedding together, %d apart; want at most 70%%", b, a)
	}
	if a, b := together["alpha"].ok, apart["alpha"].ok; float64(a) < 1.05*float64(b) {
		t.Errorf("alpha's default searches admitted: %d shedding together, %d apart; want at least 5%% more", a, b)
	}
}
