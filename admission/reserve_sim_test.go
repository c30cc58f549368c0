package admission

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/fairgate/fairgate/shed"
	"github.com/fairgate/fairgate/tenant"
)

// exportFlood is acme's critical reads (5 ms, every 20 ms) beside three
// tenants' sheddable exports (300 ms, each every 5 ms: 180 permits' worth
// against the limit's 16), with no pools and the adaptive limit fixed, for
// 10 s; shedding is on unless noShed. The limit is first come (the tenants'
// division of it off), so that the critical reserve alone stands between
// the exports and the reads.
func exportFlood(t *testing.T, noShed bool) map[string]*simCount {
	reg := testRegistryOf(t, tenant.Config{
		Tiers: map[string]tenant.TierConfig{"ent": {Rate: 1e6, Burst: 1e6}},
		Tenants: []tenant.TenantConfig{
			{ID: "acme", Tier: "ent", APIKeysSHA256: []string{tenant.HashKey("acme-key")}},
			{ID: "globex", Tier: "ent", APIKeysSHA256: []string{tenant.HashKey("globex-key")}},
			{ID: "initech", Tier: "ent", APIKeysSHA256: []string{tenant.HashKey("initech-key")}},
		},
	})
	cfg := Config{Routes: []RouteConfig{
		{Method: "GET", Path: "/me", Criticality: shed.Critical},
		{Method: "GET", Path: "/export", Cost: 10, Criticality: shed.Sheddable},
	},
		Adaptive: &shed.AdaptiveConfig{Min: 16, Max: 16, Initial: 16},
		Shedding: &shed.SheddingConfig{Disabled: noShed, CalibrationInterval: time.Second},
	}
	g := newGateWithout(t, cfg, reg, Options{Now: time.Now}, limitByShare)
	loads := []simLoad{{name: "reads", key: "acme-key", path: "/me", every: 20 * time.Millisecond, service: 5 * time.Millisecond}}
	for _, k := range []string{"acme-key", "globex-key", "initech-key"} {
		loads = append(loads, simLoad{name: "exports-" + k, key: k, path: "/export", every: 5 * time.Millisecond, service: 300 * time.Millisecond})
	}
	return simulate(t, g, loads, 10*time.Second)
}

// Without pools, shedding keeps the adaptive limit's last permits for
// critical requests (criticalReserve): acme's reads get ≥ 99% through
// while the exports are shed and fill the rest. Negative control: without
// shedding, the exports hold every permit and the reads are refused.
func TestCriticalReserveKeepsReadsBesideAnExportFlood(t *testing.T) {
	var on, off map[string]*simCount
	synctest.Test(t, func(t *testing.T) { on = exportFlood(t, false) })
	synctest.Test(t, func(t *testing.T) { off = exportFlood(t, true) })
	t.Logf("shedding: reads %+v; without: reads %+v", *on["reads"], *off["reads"])
	if r := on["reads"].share(); r < 0.99 {
		t.Errorf("critical reads admitted %.1f%% (%v), want ≥ 99%%", 100*r, on["reads"].by)
	}
	if r := off["reads"].share(); r >= 0.99 {
		t.Errorf("without shedding the reads got %.1f%%: the check above cannot fail", 100*r)
	}
}
