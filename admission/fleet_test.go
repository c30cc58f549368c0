package admission

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/tenant"
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

// modeRecorder is an embedded store that records the modes of each
// TakeAll's takes.
type modeRecorder struct {
	*ratelimit.MemoryStore
	modes [][]ratelimit.Mode
}

func (s *modeRecorder) TakeAll(ctx context.Context, takes []ratelimit.Take) ([]ratelimit.Result, error) {
	var m []ratelimit.Mode
	for _, t := range takes {
		m = append(m, t.Mode)
	}
	s.modes = append(s.modes, m)
	return s.MemoryStore.TakeAll(ctx, takes)
}

// TestModesReachTheStore: a tier's mode goes with its tenant's own and
// group buckets, each limit's with its bucket (per-limit mode), and a tier
// that sets a mode but has no group or limit still goes by TakeAll, the
// call that carries it.
func TestModesReachTheStore(t *testing.T) {
	store := &modeRecorder{MemoryStore: ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{})}
	tenants := testTenants(5)
	starter := tenants.Tiers["starter"]
	starter.Mode = tenant.ModeSync
	starter.Limits = []tenant.LimitConfig{{Name: "daily", Burst: 1000, Per: tenant.Per(24 * time.Hour), Mode: tenant.ModeExact}, {Name: "second", Burst: 50, Rate: 10}}
	tenants.Tiers["starter"] = starter
	enterprise := tenants.Tiers["enterprise"]
	enterprise.Mode = tenant.ModeExact
	tenants.Tiers["enterprise"] = enterprise
	g, err := New(testConfig(), testRegistryOf(t, tenants), Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	check(t, g, req("start-key", "POST", "/api/v1/reports/export"))
	check(t, g, req("ent-key", "GET", "/api/v1/search"))
	want := [][]ratelimit.Mode{
		{ratelimit.ModeSync, ratelimit.ModeSync, ratelimit.ModeExact, ratelimit.ModeStore}, // own, group, daily, second
		{ratelimit.ModeExact},
	}
	if fmt.Sprint(store.modes) != fmt.Sprint(want) {
		t.Errorf("modes %v, want %v", store.modes, want)
	}
}
