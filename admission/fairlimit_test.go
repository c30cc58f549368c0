package admission

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/fairgate/fairgate/shed"
	"github.com/fairgate/fairgate/tenant"
)

// limitOnly is sameTier without pools: the adaptive limit alone (4
// permits, fixed) and shedding off, so that only the limit's own sharing
// stands between the loud tenant's searches (50 ms every 5 ms, 2.5 times
// the permits) and the quiet tenant's one every 200 ms.
func limitOnly(t *testing.T, off gateRule) map[string]*simCount {
	reg := testRegistryOf(t, tenant.Config{
		Tiers: map[string]tenant.TierConfig{"pro": {Rate: 1e6, Burst: 1e6}},
		Tenants: []tenant.TenantConfig{
			{ID: "loud", Tier: "pro", APIKeysSHA256: []string{tenant.HashKey("loud-key")}},
			{ID: "quiet", Tier: "pro", APIKeysSHA256: []string{tenant.HashKey("quiet-key")}},
		},
	})
	cfg := Config{Routes: []RouteConfig{{Method: "GET", Path: "/search", Cost: 2}},
		Adaptive: &shed.AdaptiveConfig{Min: 4, Max: 4, Initial: 4},
		Shedding: &shed.SheddingConfig{Disabled: true},
	}
	g := newGateWithout(t, cfg, reg, Options{Now: time.Now}, off)
	return simulate(t, g, []simLoad{
		{name: "loud", key: "loud-key", path: "/search", every: 5 * time.Millisecond, service: 50 * time.Millisecond},
		{name: "quiet", key: "quiet-key", path: "/search", every: 200 * time.Millisecond, service: 50 * time.Millisecond},
	}, 20*time.Second)
}

// Without pools the adaptive limit is shared by tenant as a pool is
// (limitByShare): the loud tenant leaves the quiet one the permits its
// requests need, and the quiet tenant gets ≥ 99% of its requests through
// while the loud one gets the rest: the 2 permits of 4 the quiet one's
// bursts leave (its use is a quarter of a permit; its headroom, U + 2√U
// and the arriving request's, is held to its equal half). Negative
// control: first come, the loud tenant's requests hold every permit and
// the quiet one's are refused.
func TestAdaptiveLimitIsFairWithoutPools(t *testing.T) {
	var fair, first map[string]*simCount
	synctest.Test(t, func(t *testing.T) { fair = limitOnly(t, 0) })
	synctest.Test(t, func(t *testing.T) { first = limitOnly(t, limitByShare) })
	t.Logf("shared by tenant: loud %+v, quiet %+v", *fair["loud"], *fair["quiet"])
	t.Logf("first come: loud %+v, quiet %+v", *first["loud"], *first["quiet"])
	if q := fair["quiet"].share(); q < 0.99 {
		t.Errorf("quiet tenant admitted %.1f%% (%v), want ≥ 99%%", 100*q, fair["quiet"].by)
	}
	if l := fair["loud"].ok; l < 700 {
		t.Errorf("loud tenant admitted %d, want the 2 permits the quiet one leaves (20 s × 2 ÷ 50 ms = 800, ≥ 700)", l)
	}
	if q := first["quiet"].share(); q >= 0.99 {
		t.Errorf("first come: quiet admitted %.1f%%: the test above cannot fail", 100*q)
	}
}
