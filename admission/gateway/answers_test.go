package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/admission"
	"github.com/fairgate/fairgate/deploy/examples"
)

// TestUpstreamRateLimitHeadersRenamed (issue 12): the upstream's own
// RateLimit fields were added next to fairgate's, so a client read
// "RateLimit-Remaining: 24, 999". They now arrive as Upstream-RateLimit-….
func TestUpstreamRateLimitHeadersRenamed(t *testing.T) {
	base, up, _ := startGateway(t, nil, Options{})
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("RateLimit-Remaining", "999")
		w.Header().Set("RateLimit-Policy", `"upstream";q=1000;w=60`)
		w.Header().Set("X-RateLimit-Limit", "1000")
		w.WriteHeader(200)
	}
	r := do(t, "GET", base+"/api/v1/search", "demo-starter-key", nil)
	if r.status != 200 {
		t.Fatalf("status %d", r.status)
	}
	if got := r.header.Values("RateLimit-Remaining"); len(got) != 1 || got[0] == "999" {
		t.Errorf("RateLimit-Remaining = %q, want fairgate's value alone", got)
	}
	if got := r.header.Values("RateLimit-Policy"); len(got) != 1 || got[0] != `"tenant";q=25;w=5` {
		t.Errorf("RateLimit-Policy = %q, want fairgate's alone", got)
	}
	for k, want := range map[string]string{"Upstream-Ratelimit-Remaining": "999", "Upstream-Ratelimit-Limit": "1000",
		"Upstream-Ratelimit-Policy": `"upstream";q=1000;w=60`, "X-Ratelimit-Limit": ""} {
		if got := r.header.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

// TestAnyMethodProxied (issue 12): methods outside Echo's fixed list were
// admitted and charged, then answered with Echo's own 405 body. Every
// method now reaches the upstream once admitted.
func TestAnyMethodProxied(t *testing.T) {
	base, up, _ := startGateway(t, func(c *Config) {
		c.Admission.Routes = append(c.Admission.Routes, admission.RouteConfig{Method: "QUERY", Path: "/api/v1/search", Cost: 5})
	}, Options{})
	for _, m := range []string{"QUERY", "PURGE", "PROPFIND", "MKCOL"} {
		n := up.count()
		r := do(t, m, base+"/api/v1/search", "demo-enterprise-key", nil)
		if r.status != 200 || up.count() != n+1 || up.last().Method != m {
			t.Errorf("%s: %d %q, want the upstream's 200 for a %s", m, r.status, r.body, m)
		}
	}
}

// TestUpstreamSeesOnlyWhatItMayTrust (issue 12): a client's Forwarded,
// X-Real-IP, baggage and (with tracing off) traceparent/tracestate reached
// the upstream, and so did the API key fairgate had verified.
func TestUpstreamSeesOnlyWhatItMayTrust(t *testing.T) {
	base, up, _ := startGateway(t, nil, Options{})
	r := do(t, "GET", base+"/api/v1/search", "demo-starter-key", map[string]string{
		"Forwarded":   "for=203.0.113.9;host=admin.internal",
		"X-Real-IP":   "203.0.113.9",
		"Traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"Tracestate":  "x=1",
		"Baggage":     "tenant=acme",
	})
	if r.status != 200 {
		t.Fatalf("status %d", r.status)
	}
	got := up.last().Header
	for _, k := range []string{"Forwarded", "X-Real-Ip", "Traceparent", "Tracestate", "Baggage", "Authorization"} {
		if v := got.Get(k); v != "" {
			t.Errorf("the upstream got %s: %q", k, v)
		}
	}
	if got.Get("X-Forwarded-For") == "" || got.Get(admission.HeaderTenantID) != "initech" {
		t.Errorf("the upstream lacks fairgate's own headers: %v", got)
	}
}

// TestLoadEmbedded (issue 12): the loader refused a config without
// upstream, which an embedding service does not have.
func TestLoadEmbedded(t *testing.T) {
	doc := strings.Replace(string(examples.Demo), "upstream: http://127.0.0.1:8081\n", "", 1)
	if _, err := Parse([]byte(doc)); err == nil {
		t.Fatal("Parse accepted a config without upstream")
	}
	cfg, err := ParseEmbedded([]byte(doc))
	if err != nil {
		t.Fatalf("ParseEmbedded: %v", err)
	}
	if cfg.Upstream != "" || len(cfg.Admission.Routes) == 0 || cfg.Server.MaxBodyBytes != 1<<20 {
		t.Fatalf("ParseEmbedded = %+v", cfg)
	}
	if _, err := ParseEmbedded([]byte(strings.Replace(doc, "rate: 20\n", "rate: 0\n", 1))); err == nil {
		t.Fatal("ParseEmbedded accepted an invalid tier")
	}
}
