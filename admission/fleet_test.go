package admission

import (
	"sync/atomic"
	"testing"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// fleetStore is an embedded store that says n instances share it, as the
// Redis store does from its live membership.
type fleetStore struct {
	*ratelimit.MemoryStore
	n atomic.Int64
}

func (s *fleetStore) Instances() int { return int(s.n.Load()) }

// TestCapsFollowTheFleet: a tenant's concurrency cap on each instance is
// ceil(max_concurrent / instances) for the count the store gives now, not
// a number fixed at start: as the fleet grows and shrinks, so do the caps,
// and the console says how many instances it counts.
func TestCapsFollowTheFleet(t *testing.T) {
	store := &fleetStore{MemoryStore: ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{})}
	tenants := testTenants(5)
	tier := tenants.Tiers["starter"]
	tier.MaxConcurrent = 10
	tenants.Tiers["starter"] = tier
	g, err := New(testConfig(), testRegistryOf(t, tenants), Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ instances, cap int }{{1, 10}, {3, 4}, {4, 3}, {2, 5}, {12, 1}} {
		store.n.Store(int64(tc.instances))
		st, ok := g.TenantState("initech")
		if !ok {
			t.Fatal("no initech")
		}
		if st.MaxConcurrent != tc.cap {
			t.Errorf("%d instances: cap %d, want %d", tc.instances, st.MaxConcurrent, tc.cap)
		}
		if got := g.PoolsState().Instances; got != tc.instances {
			t.Errorf("%d instances: the console says %d", tc.instances, got)
		}
	}
}
