package admission

import "testing"

func TestRouteMatch(t *testing.T) {
	tests := []struct {
		method, tmpl  string
		reqM, reqPath string
		want          bool
	}{
		{"GET", "/api/v1/users/me", "GET", "/api/v1/users/me", true},
		{"GET", "/api/v1/users/me", "POST", "/api/v1/users/me", false},
		{"GET", "/api/v1/users/me", "GET", "/api/v1/users/me/", false},
		{"GET", "/api/v1/users/me", "GET", "/api/v1/users", false},
		{"GET", "/api/v1/users/{id}", "GET", "/api/v1/users/42", true},
		{"GET", "/api/v1/users/{id}", "GET", "/api/v1/users/", false},
		{"GET", "/api/v1/users/{id}", "GET", "/api/v1/users/42/x", false},
		{"*", "/static/*", "HEAD", "/static/a/b.css", true},
		{"*", "/static/*", "GET", "/static/", true},
		{"*", "/static/*", "GET", "/static", false},
		{"GET", "/", "GET", "/", true},
		{"GET", "/", "GET", "/x", false},
	}
	for _, tt := range tests {
		r, err := compileRoute(RouteConfig{Method: tt.method, Path: tt.tmpl}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.match(tt.reqM, tt.reqPath); got != tt.want {
			t.Errorf("%s %s matching %s %s = %v, want %v", tt.method, tt.tmpl, tt.reqM, tt.reqPath, got, tt.want)
		}
	}
}

func TestRouteConfigErrors(t *testing.T) {
	for _, rc := range []RouteConfig{
		{Method: "", Path: "/a"},
		{Method: "GET", Path: "a"},
		{Method: "GET", Path: "/a", Cost: -1},
		{Method: "GE T", Path: "/a"},
		{Method: "GET", Path: "/a*/b"},
	} {
		if _, err := compileRoute(rc, 3); err == nil {
			t.Errorf("compileRoute(%+v) accepted", rc)
		}
	}
}

// TestRouteLookupSpellings: a path spelled differently (extra slashes, dot
// segments, a trailing slash, other case) is still classified as its route,
// so spelling never makes an expensive route cheap.
func TestRouteLookupSpellings(t *testing.T) {
	export, err := compileRoute(RouteConfig{Method: "POST", Path: "/api/v1/reports/export", Cost: 20}, 0)
	if err != nil {
		t.Fatal(err)
	}
	tbl := routeTable{routes: []*Route{export}, unmatched: &Route{Name: unmatchedName}}
	for _, p := range []string{"/api/v1/reports/export", "/api/v1/reports/export/", "//api/v1/reports/export",
		"/api/v1/reports//export", "/api/v1/./reports/export", "/api/v1/x/../reports/export", "/API/V1/Reports/Export"} {
		if got := tbl.lookup("POST", p, ""); got != export {
			t.Errorf("POST %s classified as %q, want the export route", p, got.Name)
		}
	}
	if got := tbl.lookup("POST", "/api/v1/reports/exports", ""); got == export {
		t.Error("a different path matched the export route")
	}
}
