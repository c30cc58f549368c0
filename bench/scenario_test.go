package bench

import (
	"slices"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/admission"
	"github.com/fairgate/fairgate/admission/gateway"
	"github.com/fairgate/fairgate/internal/demoapi"
	"github.com/fairgate/fairgate/tenant"
)

// loadFigures are what a scenario claims about one tenant's load, read
// against its parsed gateway config.
type loadFigures struct {
	tokens float64 // peak tokens per second the tenant's mix costs
	quota  float64 // its rate in the config, tokens per second
	conns  float64 // peak connection-seconds a second it asks of the upstream
	tier   string
}

// figuresOf parses sc's gateway config and returns each tenant's figures.
func figuresOf(t *testing.T, sc *Scenario) (gateway.Config, map[string]loadFigures) {
	t.Helper()
	cfg, err := sc.GatewayConfig("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	up := demoapi.New(sc.Upstream)
	out := map[string]loadFigures{}
	for _, tl := range sc.Tenants {
		var wsum, cost float64
		for _, c := range tl.Calls {
			path, _, _ := strings.Cut(c.Path, "?")
			i := slices.IndexFunc(cfg.Admission.Routes, func(r admission.RouteConfig) bool { return r.Method == c.Method && r.Path == path })
			if i < 0 {
				t.Fatalf("%s: %s %s matches no route", sc.Name, c.Method, c.Path)
			}
			wsum += c.Weight
			cost += c.Weight * max(cfg.Admission.Routes[i].Cost, 1)
		}
		j := slices.IndexFunc(cfg.Tenants.Tenants, func(tc tenant.TenantConfig) bool { return tc.ID == tl.ID })
		if j < 0 {
			t.Fatalf("%s: tenant %s not in the config", sc.Name, tl.ID)
		}
		tc := cfg.Tenants.Tenants[j]
		quota := cfg.Tenants.Tiers[tc.Tier].Rate
		if tc.Rate != nil {
			quota = *tc.Rate
		}
		out[tl.ID] = loadFigures{tokens: tl.peakRate() * cost / wsum, quota: quota,
			conns: tl.peakRate() * tl.meanServiceTime(up), tier: tc.Tier}
	}
	return cfg, out
}

func noisyIDs(sc *Scenario) []string {
	var ids []string
	for _, tl := range sc.Tenants {
		if tl.Role == Noisy {
			ids = append(ids, tl.ID)
		}
	}
	return ids
}

func lookup(t *testing.T, name string, seed uint64) Scenario {
	t.Helper()
	sc, err := Lookup(name, seed)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// same-tier: one tier; the flood is inside its own rate quota, yet asks
// more of the pool than the pool has, and more of the upstream than it has
// (so none, the negative control, must fail).
func TestSameTierScenario(t *testing.T) {
	sc := lookup(t, "same-tier", 1)
	cfg, figs := figuresOf(t, &sc)
	noisy := noisyIDs(&sc)
	if len(noisy) != 1 || len(sc.Tenants) < 3 {
		t.Fatalf("noisy %v of %d tenants; want one flood and at least two innocents", noisy, len(sc.Tenants))
	}
	flood := figs[noisy[0]]
	for id, f := range figs {
		if f.tier != flood.tier {
			t.Errorf("%s is in tier %s, the flood in %s: one tier only", id, f.tier, flood.tier)
		}
		if f.tokens >= f.quota {
			t.Errorf("%s: %.0f tokens/s at the peak, not within its quota of %.0f", id, f.tokens, f.quota)
		}
	}
	if sc.Tenants[slices.IndexFunc(sc.Tenants, func(tl TenantLoad) bool { return tl.Role == Noisy })].Calls[0].Criticality.String() != "default" {
		t.Error("the flood is not of default criticality")
	}
	b := cfg.Admission.Bulkhead
	var shares int
	for _, p := range b.Pools {
		shares += p.Share
	}
	p := b.Pools[flood.tier]
	seats := float64(b.Total*p.Share) / float64(shares) * (1 + float64(p.BorrowingPercent)/100)
	if flood.conns < 2*seats {
		t.Errorf("flood asks %.1f connection-seconds a second of a pool of at most %.1f seats: not an overload", flood.conns, seats)
	}
	if up := float64(demoapi.New(sc.Upstream).Connections()); flood.conns < 1.1*up {
		t.Errorf("flood asks %.1f connection-seconds a second of %g connections: none would not suffer", flood.conns, up)
	}
	if cfg.Admission.Global != nil {
		t.Errorf("same-tier has a global backstop (%+v): the pool, not the backstop, must be what binds", *cfg.Admission.Global)
	}
}

// backstop: the heavy tenant is within its own quota but above the global
// rate, and above the upstream; each light tenant uses less than an equal
// share of the backstop.
func TestBackstopScenario(t *testing.T) {
	sc := lookup(t, "backstop", 1)
	cfg, figs := figuresOf(t, &sc)
	noisy := noisyIDs(&sc)
	if len(noisy) != 1 {
		t.Fatalf("noisy %v; want one heavy tenant", noisy)
	}
	if cfg.Admission.Global == nil {
		t.Fatal("no global backstop")
	}
	global := cfg.Admission.Global.Rate
	heavy := figs[noisy[0]]
	if heavy.tokens > heavy.quota || heavy.tokens < 0.9*heavy.quota {
		t.Errorf("heavy tenant: %.0f tokens/s at the peak, want near and within its quota of %.0f", heavy.tokens, heavy.quota)
	}
	if heavy.tokens <= 1.5*global {
		t.Errorf("heavy tenant: %.0f tokens/s at the peak, not well above the global rate %.0f", heavy.tokens, global)
	}
	if up := float64(demoapi.New(sc.Upstream).Connections()); heavy.conns < 1.1*up {
		t.Errorf("heavy tenant asks %.1f connection-seconds a second of %g connections: none would not suffer", heavy.conns, up)
	}
	for id, f := range figs {
		if id == noisy[0] {
			continue
		}
		if share := global / float64(len(figs)); f.tokens > 0.8*share {
			t.Errorf("%s: %.1f tokens/s, not well below an equal share of the backstop (%.1f)", id, f.tokens, share)
		}
		if f.tokens >= f.quota {
			t.Errorf("%s: %.1f tokens/s, not within its quota %.0f", id, f.tokens, f.quota)
		}
	}
}

// many-tenants: at least 100 tenants of every tier, exactly five noisy,
// drawn by the seed; the innocents light and within their quotas.
func TestManyTenantsScenario(t *testing.T) {
	sc := lookup(t, "many-tenants", 1)
	_, figs := figuresOf(t, &sc)
	if len(sc.Tenants) < 100 {
		t.Errorf("%d tenants, want ≥ 100", len(sc.Tenants))
	}
	tiers := map[string]int{}
	var innocentRate float64
	for _, tl := range sc.Tenants {
		tiers[tl.Tier]++
		if tl.Role == Innocent {
			innocentRate += tl.Rate
			if tl.Rate < 1 || tl.Rate > 3 || figs[tl.ID].tokens >= figs[tl.ID].quota {
				t.Errorf("%s: %v requests/s, %.1f tokens/s of %.0f: want a light innocent", tl.ID, tl.Rate, figs[tl.ID].tokens, figs[tl.ID].quota)
			}
		}
	}
	if len(tiers) < 3 {
		t.Errorf("tiers %v, want all three", tiers)
	}
	noisy := noisyIDs(&sc)
	if len(noisy) != 5 {
		t.Errorf("%d noisy tenants (%v), want exactly 5", len(noisy), noisy)
	}
	var noisyConns float64
	for _, id := range noisy {
		noisyConns += figs[id].conns
	}
	if up := float64(demoapi.New(sc.Upstream).Connections()); noisyConns < 2*up {
		t.Errorf("noisy tenants ask %.1f connection-seconds a second of %g connections: not an overload", noisyConns, up)
	}
	// The generator must keep up on a 2-core machine.
	if total := innocentRate + 5*sc.Tenants[slices.IndexFunc(sc.Tenants, func(tl TenantLoad) bool { return tl.Role == Noisy })].peakRate(); total > 500 {
		t.Errorf("%.0f requests/s at the peak: too many for the load generator", total)
	}
	if again := noisyIDs(ptr(lookup(t, "many-tenants", 1))); !slices.Equal(again, noisy) {
		t.Errorf("seed 1 drew %v, then %v: not repeatable", noisy, again)
	}
	differ := false
	for seed := uint64(2); seed < 6; seed++ {
		differ = differ || !slices.Equal(noisyIDs(ptr(lookup(t, "many-tenants", seed))), noisy)
	}
	if !differ {
		t.Errorf("seeds 1 to 5 all drew %v", noisy)
	}
}

func ptr[T any](v T) *T { return &v }
