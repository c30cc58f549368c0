package admission

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCredentials (issue 12): X-API-Key counts when Authorization carries
// another scheme; a presented but malformed key is unknown_key, not
// missing_key; the verified credential is hidden from the upstream unless
// hide_credentials is false, and other credentials pass.
func TestCredentials(t *testing.T) {
	no := false
	for _, tc := range []struct {
		name    string
		hdr     http.Header
		hide    *bool
		status  int
		reason  string
		visible []string // headers next must see
		hidden  []string // headers next must not see
	}{
		{"basic for the upstream, key in X-API-Key", http.Header{"Authorization": {"Basic dTpw"}, "X-Api-Key": {"ent-key"}}, nil,
			200, "", []string{"Authorization"}, []string{"X-Api-Key"}},
		{"bearer", http.Header{"Authorization": {"Bearer ent-key"}}, nil, 200, "", nil, []string{"Authorization"}},
		{"kept when hide_credentials is false", http.Header{"X-Api-Key": {"ent-key"}}, &no, 200, "", []string{"X-Api-Key"}, nil},
		{"malformed bearer", http.Header{"Authorization": {"Bearer "}}, nil, 401, "unknown_key", nil, nil},
		{"malformed X-API-Key", http.Header{"X-Api-Key": {"a b"}}, nil, 401, "unknown_key", nil, nil},
		{"basic alone", http.Header{"Authorization": {"Basic dTpw"}}, nil, 401, "missing_key", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.HideCredentials = tc.hide
			g, err := New(cfg, testRegistry(t), Options{})
			if err != nil {
				t.Fatal(err)
			}
			h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for _, k := range tc.visible {
					if r.Header.Get(k) == "" {
						t.Errorf("%s did not reach the handler", k)
					}
				}
				for _, k := range tc.hidden {
					if v := r.Header.Get(k); v != "" {
						t.Errorf("%s: %q reached the handler", k, v)
					}
				}
			}))
			r := httptest.NewRequest("GET", "/api/v1/users/me", nil)
			for k, v := range tc.hdr {
				r.Header[k] = v
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.status, w.Body)
			}
			if tc.reason != "" && !strings.Contains(w.Body.String(), `"reason":"`+tc.reason+`"`) {
				t.Errorf("body %s, want reason %s", w.Body, tc.reason)
			}
		})
	}
}
