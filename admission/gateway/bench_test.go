package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/deploy/examples"
)

// cannedUpstream answers every request at once with a small 200, without a
// network: what the gateway's handler costs, apart from net/http's server
// and client connections.
type cannedUpstream struct{}

func (cannedUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		r.Body.Close()
	}
	return &http.Response{StatusCode: 200, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Request: r,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(strings.NewReader(`{"id":"me"}`)),
		ContentLength: 11}, nil
}

// benchConfig is the demo config with the tiers' quotas far from binding
// except the starter tier's, which a single request spends, and no global
// backstop.
func benchConfig(b testing.TB) Config {
	cfg, err := Parse(examples.Demo)
	if err != nil {
		b.Fatal(err)
	}
	for name, tier := range cfg.Tenants.Tiers {
		tier.Rate, tier.Burst = 1e9, 1e12
		if name == "starter" {
			tier.Rate, tier.Burst = 1e-3, 20
		}
		cfg.Tenants.Tiers[name] = tier
	}
	cfg.Admission.Global = nil
	return cfg
}

// benchGateway is the gateway's handler on benchConfig.
func benchGateway(b *testing.B) http.Handler {
	srv, err := New(benchConfig(b), Options{Transport: cannedUpstream{}})
	if err != nil {
		b.Fatal(err)
	}
	return srv.Handler()
}

func benchHandler(b *testing.B, h http.Handler, key string, want int) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r := httptest.NewRequest("GET", "/api/v1/users/me", nil)
			r.Header.Set("Authorization", "Bearer "+key)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != want {
				b.Errorf("status %d, want %d: %s", w.Code, want, w.Body)
				return
			}
		}
	})
}

// BenchmarkGatewayProxied is an admitted request through the gateway's
// whole handler (hygiene, pipeline, reverse proxy) to an upstream that
// answers at once. The request and recorder the benchmark makes cost 15
// allocations of their own (BenchmarkGatewayHarness).
func BenchmarkGatewayProxied(b *testing.B) {
	benchHandler(b, benchGateway(b), "demo-enterprise-key", http.StatusOK)
}

// BenchmarkGatewayRejected is a request of a tenant over its quota: 429.
func BenchmarkGatewayRejected(b *testing.B) {
	h := benchGateway(b)
	for range 25 { // spend the burst of 20
		r := httptest.NewRequest("GET", "/api/v1/users/me", nil)
		r.Header.Set("Authorization", "Bearer demo-starter-key")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	benchHandler(b, h, "demo-starter-key", http.StatusTooManyRequests)
}

// BenchmarkGatewayHarness is the benchmarks' own cost: the request and the
// recorder, through a handler that does nothing.
func BenchmarkGatewayHarness(b *testing.B) {
	benchHandler(b, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), "k", http.StatusOK)
}
