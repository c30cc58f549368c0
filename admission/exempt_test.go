package admission

import (
	"context"
	"testing"
	"time"

	"github.com/fairgate/fairgate/bulkhead"
	"github.com/fairgate/fairgate/shed"
	"github.com/fairgate/fairgate/tenant"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// An exempt route or tenant passes every shared layer without waiting
// (Kubernetes APF's exempt level): with the one seat of the pools and the
// one permit of the adaptive limit held by acme's request, acme's second
// request is refused, while acme's exempt /healthz and the exempt tenant
// ops's request pass at once, counted with outcome exempt. The refused
// request is the negative control: the same pipeline without exempt.
func TestExemptPassesTheSharedLayers(t *testing.T) {
	reg := testRegistryOf(t, tenant.Config{
		Tiers: map[string]tenant.TierConfig{"ent": {Rate: 100, Burst: 100, Pool: "p"}},
		Tenants: []tenant.TenantConfig{
			{ID: "acme", Tier: "ent", APIKeysSHA256: []string{tenant.HashKey("acme-key")}},
			{ID: "ops", Tier: "ent", APIKeysSHA256: []string{tenant.HashKey("ops-key")}, Exempt: true},
		},
	})
	cfg := Config{
		Routes: []RouteConfig{
			{Method: "GET", Path: "/work", Criticality: shed.Sheddable},
			{Method: "GET", Path: "/healthz", Exempt: true},
		},
		Bulkhead: &bulkhead.Config{Total: 1, Pools: map[string]bulkhead.PoolConfig{"p": {Share: 1, QueueLength: 0, MaxWait: time.Second}}},
		Adaptive: &shed.AdaptiveConfig{Min: 1, Max: 1, Initial: 1},
	}
	preg := prometheus.NewRegistry()
	m, err := NewMetrics(preg)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg, reg, Options{Now: time.Now, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := func(key, path string) Decision {
		t.Helper()
		d, err := g.Check(ctx, req(key, "GET", path))
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed && !d.Lease().StartUpstream(ctx) {
			t.Fatalf("%s %s: admitted, then refused by the adaptive limit", key, path)
		}
		return d
	}
	held := start("acme-key", "/work")
	if !held.Allowed || held.Exempt {
		t.Fatalf("acme's first request: allowed %v exempt %v; want admitted, not exempt", held.Allowed, held.Exempt)
	}
	defer held.Lease().Release()
	if d := start("acme-key", "/work"); d.Allowed {
		d.Lease().Release()
		t.Fatal("acme's second request found a seat: the checks below cannot fail")
	}
	for _, c := range []struct{ key, path string }{{"acme-key", "/healthz"}, {"ops-key", "/work"}} {
		d := start(c.key, c.path)
		if !d.Allowed || !d.Exempt {
			t.Errorf("%s %s beside the held seat and permit: allowed %v (%s) exempt %v; want admitted as exempt", c.key, c.path, d.Allowed, d.Reason, d.Exempt)
		}
		d.Lease().Release()
	}
	for _, c := range []struct{ tenant, route string }{{"acme", "GET /healthz"}, {"ops", "GET /work"}} {
		got := testutil.ToFloat64(m.decisions.WithLabelValues(c.tenant, "ent", c.route, LayerNone.String(), OutcomeExempt))
		if got != 1 {
			t.Errorf("fairgate_decisions_total{tenant=%q,route=%q,outcome=\"exempt\"} = %v, want 1", c.tenant, c.route, got)
		}
	}
}
