package bulkhead

import (
	"sync"
	"testing"
)

func TestCapsOverCapAndRelease(t *testing.T) {
	c := NewCaps()
	a, ok := c.TryAcquire("acme", 2)
	if !ok {
		t.Fatal("first request under a cap of 2 refused")
	}
	b, ok := c.TryAcquire("acme", 2)
	if !ok {
		t.Fatal("second request under a cap of 2 refused")
	}
	if _, ok := c.TryAcquire("acme", 2); ok {
		t.Fatal("third request over a cap of 2 admitted")
	}
	if _, ok := c.TryAcquire("globex", 2); !ok {
		t.Fatal("another tenant refused because of acme's cap")
	}
	a.Release()
	a.Release() // harmless
	if got := c.InFlight("acme"); got != 1 {
		t.Fatalf("InFlight after one release (twice) = %d; want 1", got)
	}
	if _, ok := c.TryAcquire("acme", 2); !ok {
		t.Fatal("request after a release refused")
	}
	if _, ok := c.TryAcquire("acme", 0); ok {
		t.Fatal("a cap of 0 admitted a request")
	}
	b.Release()
	var zero Slot
	zero.Release() // harmless
}

func TestCapsForgetIdleTenants(t *testing.T) {
	c := NewCaps()
	for i := range 1000 {
		s, _ := c.TryAcquire(string(rune('a'+i%26))+string(rune(i)), 1)
		s.Release()
	}
	if n := c.Tenants(); n != 0 {
		t.Fatalf("Tenants after every slot released = %d; want 0", n)
	}
}

// Many goroutines hammer a few tenants: no tenant ever exceeds its cap and
// every count returns to zero. Run with -race.
func TestCapsConcurrentCountsExact(t *testing.T) {
	const maxInFlight, workers, rounds = 3, 16, 2000
	c := NewCaps()
	tenants := []string{"acme", "globex", "initech"}
	var mu sync.Mutex
	held := map[string]int{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				tenant := tenants[(w+i)%len(tenants)]
				s, ok := c.TryAcquire(tenant, maxInFlight)
				if !ok {
					continue
				}
				mu.Lock()
				held[tenant]++
				if held[tenant] > maxInFlight {
					t.Errorf("%s holds %d slots; cap is %d", tenant, held[tenant], maxInFlight)
				}
				mu.Unlock()
				mu.Lock()
				held[tenant]--
				mu.Unlock()
				s.Release()
				s.Release()
			}
		})
	}
	wg.Wait()
	for _, tenant := range tenants {
		if got := c.InFlight(tenant); got != 0 {
			t.Errorf("InFlight(%s) = %d after all released; want 0", tenant, got)
		}
	}
	if n := c.Tenants(); n != 0 {
		t.Errorf("Tenants = %d after all released; want 0", n)
	}
}

// TestSlotReleaseThroughCopies: releasing a slot through several copies,
// even after its token was reused by a later slot, gives back exactly one.
func TestSlotReleaseThroughCopies(t *testing.T) {
	c := NewCaps()
	a, ok := c.TryAcquire("acme", 2)
	if !ok {
		t.Fatal("first slot refused")
	}
	b, _ := c.TryAcquire("acme", 2)
	copied := a
	a.Release()
	copied.Release()
	a.Release()
	if got := c.InFlight("acme"); got != 1 {
		t.Fatalf("in flight after releasing one slot through three handles: %d, want 1", got)
	}
	// a's token is reused by the next slot; a's old handles must not
	// release it.
	d, _ := c.TryAcquire("acme", 2)
	copied.Release()
	if got := c.InFlight("acme"); got != 2 {
		t.Fatalf("a stale handle released a reused slot: in flight %d, want 2", got)
	}
	b.Release()
	d.Release()
	if got, n := c.InFlight("acme"), c.Tenants(); got != 0 || n != 0 {
		t.Fatalf("after all releases: in flight %d, tenants %d", got, n)
	}
}
