package admission

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/shed"
)

// classifyGate is the test tenants with an items route, an export route and
// the given unmatched pricing and encoded-slash policy.
func classifyGate(t *testing.T, unmatched *UnmatchedConfig, slashes EncodedSlashes) *Gate {
	t.Helper()
	cfg := Config{Routes: []RouteConfig{
		{Method: "GET", Path: "/api/v2/items/{id}", Cost: 5},
		{Method: "POST", Path: "/api/v1/reports/export", Cost: 20},
	}, Unmatched: unmatched, EncodedSlashes: slashes}
	g, err := New(cfg, testRegistry(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func check(t *testing.T, g *Gate, r Request) Decision {
	t.Helper()
	d, err := g.Check(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	d.Lease().Release()
	return d
}

// TestEncodedSlash (issue 12): "/items/a%2Fb" was decoded before matching,
// so {id} saw two segments and the request cost 1 as unmatched while an
// upstream routing on the escaped path ran the items handler. By default it
// is refused with 400; with encoded_slashes: allow it is the items route.
func TestEncodedSlash(t *testing.T) {
	r := req("ent-key", "GET", "/api/v2/items/a/b")
	r.RawPath = "/api/v2/items/a%2Fb"

	d := check(t, classifyGate(t, nil, RefuseEncodedSlashes), r)
	if d.Allowed || d.Status != http.StatusBadRequest || d.Reason != ReasonEncodedSlash {
		t.Errorf("refuse: %v %d %v, want a 400 encoded_slash", d.Allowed, d.Status, d.Reason)
	}
	d = check(t, classifyGate(t, nil, AllowEncodedSlashes), r)
	if !d.Allowed || d.Route.Template != "/api/v2/items/{id}" {
		t.Errorf("allow: classified as %q (allowed %v), want the items route", d.Route.Name, d.Allowed)
	}
	// Lower case %2f too, and a slash escaped in a literal segment is not
	// that segment.
	r.RawPath = "/api/v2/items/a%2fb"
	if d := check(t, classifyGate(t, nil, AllowEncodedSlashes), r); d.Route.Template != "/api/v2/items/{id}" {
		t.Errorf("allow %%2f: classified as %q", d.Route.Name)
	}
	r = req("ent-key", "POST", "/api/v1/reports/export")
	r.RawPath = "/api/v1%2Freports/export"
	if d := check(t, classifyGate(t, nil, AllowEncodedSlashes), r); d.Route.Name != unmatchedName {
		t.Errorf("allow: %s classified as %q, want unmatched", r.RawPath, d.Route.Name)
	}

	// Through the middleware: the contract's 400 body, and the handler
	// never runs.
	h := classifyGate(t, nil, RefuseEncodedSlashes).Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("a refused request reached the handler")
	}))
	hr := httptest.NewRequest("GET", "/api/v2/items/a%2Fb", nil)
	hr.Header.Set("X-API-Key", "ent-key")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, hr)
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"reason":"encoded_slash"`) {
		t.Errorf("middleware: %d %s", w.Code, w.Body)
	}
}

// TestLookupMethodCaseAndParams (issue 12): "post" and "/export;jsessionid=1"
// were unmatched (cost 1) although many upstreams serve them as the export.
func TestLookupMethodCaseAndParams(t *testing.T) {
	g := classifyGate(t, nil, RefuseEncodedSlashes)
	for _, tc := range []struct{ method, path string }{
		{"post", "/api/v1/reports/export"},
		{"Post", "/api/v1/reports/export;jsessionid=1"},
		{"POST", "/api/v1/reports;x=1/export"},
		{"POST", "/api/v1/reports/export;"},
		{"POST", "/api/v1/;x/reports/export"},
	} {
		if d := check(t, g, req("ent-key", tc.method, tc.path)); d.Route.Cost != 20 {
			t.Errorf("%s %s classified as %q, want the export route", tc.method, tc.path, d.Route.Name)
		}
	}
	if d := check(t, g, req("ent-key", "POST", "/api/v1/reports/exports;x")); d.Route.Cost == 20 {
		t.Error("a different path matched the export route")
	}
}

// TestUnmatchedConfigurable (issue 12): unknown requests may cost the most.
func TestUnmatchedConfigurable(t *testing.T) {
	g := classifyGate(t, &UnmatchedConfig{Cost: 20, Criticality: shed.Sheddable}, RefuseEncodedSlashes)
	d := check(t, g, req("ent-key", "DELETE", "/anything"))
	if d.Route.Name != unmatchedName || d.Route.Cost != 20 || d.Route.Criticality != shed.Sheddable {
		t.Errorf("unmatched = %+v, want cost 20, sheddable", *d.Route)
	}
	if got, want := d.Quotas[0].Remaining, 480.0; got != want {
		t.Errorf("tenant tokens after an unmatched request = %v, want %v", got, want)
	}
	cfg := Config{Unmatched: &UnmatchedConfig{Cost: 30}}
	if _, err := New(cfg, testRegistry(t), Options{}); err == nil || !strings.Contains(err.Error(), "unmatched.cost: 30 is above tiers.starter.burst") {
		t.Errorf("unmatched cost above a burst: %v", err)
	}
}

// TestRouteTemplateRefused (issue 12): templates no cleaned path can match.
func TestRouteTemplateRefused(t *testing.T) {
	for _, p := range []string{"/a/", "/a//b", "/a/./b", "/a/../b", "/.", "/a/x;y"} {
		_, err := compileRoute(RouteConfig{Method: "GET", Path: p}, 2)
		if err == nil || !strings.HasPrefix(err.Error(), "routes[2].path: ") {
			t.Errorf("template %q: %v, want an error naming routes[2].path", p, err)
		}
	}
	if _, err := compileRoute(RouteConfig{Method: "GET", Path: "/"}, 0); err != nil {
		t.Errorf("template /: %v", err)
	}
}

// TestMethodOverrideStripped (issue 12): the method override headers that
// frameworks honour would turn a GET priced at 1 into a POST upstream.
func TestMethodOverrideStripped(t *testing.T) {
	g := classifyGate(t, nil, RefuseEncodedSlashes)
	h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k := range r.Header {
			if strings.Contains(strings.ToLower(strings.ReplaceAll(k, "_", "-")), "method") {
				t.Errorf("%s reached the handler", k)
			}
		}
	}))
	r := httptest.NewRequest("GET", "/api/v2/items/1", nil)
	r.Header.Set("X-API-Key", "ent-key")
	r.Header.Set("X-HTTP-Method-Override", "POST")
	r.Header.Set("X-Http-Method", "POST")
	r.Header.Set("X-Method-Override", "POST")
	r.Header["X_http_method_override"] = []string{"POST"}
	h.ServeHTTP(httptest.NewRecorder(), r)
}
