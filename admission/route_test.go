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
