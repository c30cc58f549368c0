package admission

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fairgate/fairgate/tenant"
)

// benchWriter is a ResponseWriter that allocates nothing per request: its
// header map is cleared (keeping its buckets) between requests and the body
// is discarded. With it, a benchmark's allocs/op are the middleware's own.
type benchWriter struct {
	h      http.Header
	status int
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) WriteHeader(code int)        { w.status = code }
func (w *benchWriter) Write(b []byte) (int, error) { return len(b), nil }

// benchMiddleware runs requests with key through h, RunParallel, and fails
// unless each gets status want. The request and writer are reused, so the
// reported allocations are the middleware's alone.
func benchMiddleware(b *testing.B, h http.Handler, key string, want int) {
	b.Helper()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := httptest.NewRequest("GET", "/api/v1/users/me", nil)
		r.Header = http.Header{}
		auth := []string{"Bearer " + key}
		w := &benchWriter{h: http.Header{}}
		for pb.Next() {
			clear(r.Header)
			r.Header["Authorization"] = auth
			clear(w.h)
			w.status = http.StatusOK
			h.ServeHTTP(w, r)
			if w.status != want {
				b.Errorf("status %d, want %d", w.status, want)
				return
			}
		}
	})
}

// BenchmarkMiddlewareAdmit is an admitted request through the embedded
// middleware, every quota far from binding: what the gate adds to a request.
func BenchmarkMiddlewareAdmit(b *testing.B) {
	g, err := New(testConfig(), benchRegistry(b), Options{})
	if err != nil {
		b.Fatal(err)
	}
	h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	benchMiddleware(b, h, "ent-key", http.StatusOK)
}

// BenchmarkMiddlewareReject is a tenant far over its quota: every request
// is answered 429 by the rate layer, the cost of a rejection under a flood.
func BenchmarkMiddlewareReject(b *testing.B) {
	g := floodGate(b)
	h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	h.ServeHTTP(&benchWriter{h: http.Header{}}, flood(b)) // spend the burst
	benchMiddleware(b, h, "flood-key", http.StatusTooManyRequests)
}

// floodGate is a gate whose tenant "noisy" (key flood-key) has a burst of
// one token and a token every 1000 s: every request after its first is
// rejected by the rate layer.
func floodGate(b testing.TB) *Gate {
	reg, err := tenant.NewRegistry(tenant.Config{
		Tiers:   map[string]tenant.TierConfig{"free": {Rate: 1e-3, Burst: 1}},
		Tenants: []tenant.TenantConfig{{ID: "noisy", Tier: "free", APIKeysSHA256: []string{tenant.HashKey("flood-key")}}},
	})
	if err != nil {
		b.Fatal(err)
	}
	g, err := New(Config{Routes: []RouteConfig{{Method: "GET", Path: "/api/v1/users/me", Cost: 1}}}, reg, Options{})
	if err != nil {
		b.Fatal(err)
	}
	return g
}

func flood(b testing.TB) *http.Request {
	r := httptest.NewRequest("GET", "/api/v1/users/me", nil)
	r.Header.Set("Authorization", "Bearer flood-key")
	return r
}
