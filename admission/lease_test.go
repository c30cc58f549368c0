package admission

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fairgate/fairgate/shed"
	"github.com/fairgate/fairgate/tenant"
)

// adaptiveGate is a gate with a concurrency cap of 2 and an adaptive limit
// fixed at 1, without pools, so the limiter itself says no.
func adaptiveGate(t *testing.T) *Gate {
	t.Helper()
	reg, err := tenant.NewRegistry(tenant.Config{
		Tiers:   map[string]tenant.TierConfig{"t": {Rate: 100, Burst: 100, MaxConcurrent: 2}},
		Tenants: []tenant.TenantConfig{{ID: "acme", Tier: "t", APIKeysSHA256: []string{tenant.HashKey("k")}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Adaptive: &shed.AdaptiveConfig{Min: 1, Max: 1, Initial: 1, MaxLatency: time.Hour},
		Shedding: &shed.SheddingConfig{Disabled: true}}
	g, err := New(cfg, reg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestLeaseReleasesOnce: every method of a lease may be called again, and
// what it held is given back exactly once.
func TestLeaseReleasesOnce(t *testing.T) {
	g := adaptiveGate(t)
	ctx := context.Background()
	d, err := g.Check(ctx, req("k", "GET", "/x"))
	if err != nil || !d.Allowed {
		t.Fatalf("Check = %+v, %v", d, err)
	}
	l := d.Lease()
	if got, want := g.limiter.Inflight(), 0; got != want {
		t.Fatalf("permits before StartUpstream = %d, want %d (Check takes none)", got, want)
	}
	if !l.StartUpstream(ctx) || !l.StartUpstream(ctx) {
		t.Fatal("StartUpstream refused under the limit")
	}
	if got, want := g.limiter.Inflight(), 1; got != want {
		t.Fatalf("permits after two StartUpstream = %d, want %d", got, want)
	}
	l.Answered()
	l.Answered()
	if got := g.limiter.Inflight(); got != 0 {
		t.Fatalf("permits after Answered = %d, want 0", got)
	}
	if got, want := g.caps.InFlight("acme"), 1; got != want {
		t.Fatalf("slots after Answered = %d, want %d (Release gives the slot back)", got, want)
	}
	l.Release()
	l.Release()
	if got := g.caps.InFlight("acme"); got != 0 {
		t.Fatalf("slots after Release = %d, want 0", got)
	}
	// A second request: refused by the adaptive limit while the first
	// holds the permit, and then its lease holds nothing.
	a, _ := g.Check(ctx, req("k", "GET", "/x"))
	b, _ := g.Check(ctx, req("k", "GET", "/x"))
	if !a.Lease().StartUpstream(ctx) {
		t.Fatal("first StartUpstream refused")
	}
	if b.Lease().StartUpstream(ctx) {
		t.Fatal("second StartUpstream admitted over an adaptive limit of 1")
	}
	if got, want := g.caps.InFlight("acme"), 1; got != want {
		t.Fatalf("slots after a refused StartUpstream = %d, want %d (it releases its lease)", got, want)
	}
	a.Lease().Release()
	if got := g.limiter.Inflight() + g.caps.InFlight("acme"); got != 0 {
		t.Fatalf("held after releasing all = %d, want 0", got)
	}
}

// TestMiddlewareAdaptiveLimit: embedded, the handler is the upstream, so a
// request over the adaptive limit gets the contract's 503 from the
// adaptive layer and the handler never runs.
func TestMiddlewareAdaptiveLimit(t *testing.T) {
	g := adaptiveGate(t)
	inside, release := make(chan struct{}), make(chan struct{})
	h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inside <- struct{}{}
		<-release
	}))
	newReq := func() *http.Request {
		r := httptest.NewRequest("GET", "/x", nil)
		r.Header.Set("X-API-Key", "k")
		return r
	}
	first := make(chan int)
	go func() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, newReq())
		first <- rec.Code
	}()
	<-inside
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, newReq())
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("over the limit: %d %q, want 503 with Retry-After", rec.Code, rec.Body)
	}
	close(release)
	if code := <-first; code != http.StatusOK {
		t.Fatalf("first request: %d, want 200", code)
	}
	if got := g.limiter.Inflight() + g.caps.InFlight("acme"); got != 0 {
		t.Fatalf("held after both requests = %d, want 0", got)
	}
}
