package admission

import (
	"context"
	"net/http"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/fakeclock"
	"github.com/fairgate/fairgate/internal/memstat"
	"github.com/fairgate/fairgate/tenant"
)

// manyTenants returns a tenant config of n tenants of one tier ("t0".."tN",
// key "key-I"): rate 1 token/s, burst 10, so a bucket that gave one token
// is full again, and forgettable, one second later.
func manyTenants(n int) tenant.Config {
	c := tenant.Config{Tiers: map[string]tenant.TierConfig{"free": {Rate: 1, Burst: 10, MaxConcurrent: 2}}}
	c.Tenants = make([]tenant.TenantConfig, n)
	for i := range c.Tenants {
		c.Tenants[i] = tenant.TenantConfig{ID: "t" + strconv.Itoa(i), Tier: "free",
			APIKeysSHA256: []string{tenant.HashKey("key-" + strconv.Itoa(i))}}
	}
	return c
}

// TestManyTenantsMemoryPlateaus streams requests over 100,000 configured
// tenants through Gate.Check (no HTTP), 5,000 new tenants in each second of
// a fake clock, and shows what the gate's memory is bounded by:
//
//   - each configured tenant costs a fixed number of bytes (registry and
//     the gate's compiled tables), measured and logged;
//   - the embedded store holds a bucket only while it is below full: with
//     a refill time of one second and one-second sweeps, one second's worth
//     of tenants, whatever the number seen;
//   - the heap the store takes is bounded by that active set (a few times
//     the first window's growth: the shards' maps grow once more as deleted
//     slots are reused, then stay flat, and never shrink), not by the
//     tenants ever seen; after the stream no bucket is left;
//   - no goroutine is started per request or per tenant.
//
// Negative control: the same stream with sweeps effectively off keeps a
// bucket for every tenant seen.
//
// One million tenants would be the figure, but building the
// registry for them takes ~48 s under -race (8 s without, most of it map
// growth and GC); the per-tenant bytes measured at 100,000 were the same at
// one million in a run without -race (~460 B), so the bound extrapolates
// linearly.
func TestManyTenantsMemoryPlateaus(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 20_000
	}
	const windows = 20
	per := n / windows
	route := Config{Routes: []RouteConfig{{Method: "GET", Path: "/api/v1/users/me", Cost: 1}}}

	h0 := memstat.HeapAlloc()
	reg, err := tenant.NewRegistry(manyTenants(n))
	if err != nil {
		t.Fatal(err)
	}
	g0, err := New(route, reg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	perTenant := float64(memstat.HeapAlloc()-h0) / float64(n)
	runtime.KeepAlive(g0)
	t.Logf("%d configured tenants: %.0f B each (registry and gate)", n, perTenant)

	// stream sends one request for each of tenants [0, windows×per), per
	// tenants a second, and returns the store's largest size and the heap
	// after the first window, every fifth and the last, relative to the
	// heap before the first (a measurement is two full collections, which
	// the race detector makes slow).
	stream := func(t *testing.T, sweep time.Duration, windows int) (store *ratelimit.MemoryStore, peak int, growth []int64) {
		clk := fakeclock.New()
		store = ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{Now: clk.Now, SweepInterval: sweep})
		g, err := New(route, reg, Options{Store: store, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		r := Request{Method: "GET", Path: "/api/v1/users/me", Header: h, RemoteAddr: "192.0.2.1:1"}
		goroutines := runtime.NumGoroutine()
		base := memstat.HeapAlloc()
		for w := range windows {
			for i := w * per; i < (w+1)*per; i++ {
				h.Set("X-Api-Key", "key-"+strconv.Itoa(i))
				d, err := g.Check(context.Background(), r)
				if err != nil || !d.Allowed {
					t.Fatalf("tenant %d: %+v %v", i, d, err)
				}
				d.Lease().Release()
			}
			peak = max(peak, store.Len())
			if w == 0 || w%5 == 4 || w == windows-1 {
				growth = append(growth, memstat.HeapAlloc()-base)
			}
			clk.Advance(time.Second)
		}
		if after := runtime.NumGoroutine(); after > goroutines {
			t.Errorf("goroutines %d -> %d over %d requests", goroutines, after, windows*per)
		}
		store.Sweep(store.Clock() + int64(2*time.Second))
		return store, peak, growth
	}

	t.Run("expiring", func(t *testing.T) {
		store, peak, growth := stream(t, time.Second, windows)
		t.Logf("heap growth after windows 1, 5, 10, … (B): %v", growth)
		if peak > per {
			t.Fatalf("the store held up to %d buckets, want at most one second's worth (%d)", peak, per)
		}
		bound := 3*growth[0] + 1<<20
		if last := growth[len(growth)-1]; last > bound {
			t.Fatalf("heap grew %d B after %d tenants, over the bound of %d B (3× the first window's %d B + 1 MiB)", last, n, bound, growth[0])
		}
		if got := store.Len(); got != 0 {
			t.Fatalf("after every bucket refilled and a sweep, %d remain", got)
		}
		t.Logf("%d tenants seen, at most %d active: store heap %d B after the first window (%.0f B per active bucket), %d B at the end (%.0f B per active bucket at the plateau, %.1f B per tenant seen)",
			n, peak, growth[0], float64(growth[0])/float64(peak), growth[len(growth)-1], float64(growth[len(growth)-1])/float64(peak), float64(growth[len(growth)-1])/float64(n))
	})
	t.Run("negative-control", func(t *testing.T) {
		const w = 4
		store, peak, growth := stream(t, time.Hour, w)
		if peak != w*per {
			t.Fatalf("without sweeps the store held %d buckets, want %d (one per tenant seen)", peak, w*per)
		}
		t.Logf("no sweeps: %d buckets for %d tenants seen, heap +%d B (%.0f B per tenant seen)", peak, w*per, growth[len(growth)-1], float64(growth[len(growth)-1])/float64(w*per))
		runtime.KeepAlive(store)
	})
}
