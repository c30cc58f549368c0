package admission

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/tenant"
)

// TestAuthNoneRoutes (issue 12): CORS preflight and health checks need no
// credentials by design. A route with auth: none admits them without a
// key, limited per client IP by the anonymous bucket.
func TestAuthNoneRoutes(t *testing.T) {
	cfg := testConfig()
	cfg.Routes = append(cfg.Routes,
		RouteConfig{Method: "OPTIONS", Path: "/api/*", Auth: AuthNone},
		RouteConfig{Method: "GET", Path: "/healthz", Auth: AuthNone})
	cfg.Anonymous = &tenant.Quota{Rate: 1, Burst: 2}
	g, err := New(cfg, testRegistry(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get(HeaderTenantID); v != "" {
			t.Errorf("an anonymous request reached the handler as tenant %q", v)
		}
		w.WriteHeader(204)
	}))
	do := func(method, path, addr string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, nil)
		r.RemoteAddr = addr
		r.Header.Set("X-Tenant-Id", "acme")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := do("OPTIONS", "/api/v1/search", "192.0.2.1:1"); w.Code != 204 || w.Header().Get("RateLimit-Policy") != `"anonymous";q=2;w=2` {
		t.Fatalf("preflight: %d %v", w.Code, w.Header())
	}
	if w := do("GET", "/healthz", "192.0.2.1:2"); w.Code != 204 {
		t.Fatalf("health: %d", w.Code)
	}
	w := do("GET", "/healthz", "192.0.2.1:3")
	if w.Code != 429 || !strings.Contains(w.Body.String(), `"reason":"anonymous_quota"`) || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("third from one address: %d %s", w.Code, w.Body)
	}
	if w := do("GET", "/healthz", "198.51.100.1:1"); w.Code != 204 {
		t.Fatalf("another address: %d", w.Code)
	}
	// Other routes still need a key.
	if w := do("GET", "/api/v1/search", "198.51.100.1:1"); w.Code != 401 {
		t.Fatalf("keyed route without a key: %d", w.Code)
	}
	for _, rc := range []RouteConfig{
		{Method: "GET", Path: "/a", Auth: AuthNone, Group: "exports"},
		{Method: "GET", Path: "/a", Auth: AuthNone, Cost: 30},
	} {
		cfg := Config{Routes: []RouteConfig{rc}}
		if _, err := New(cfg, testRegistry(t), Options{}); err == nil {
			t.Errorf("%+v accepted", rc)
		}
	}
}
