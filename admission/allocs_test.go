//go:build !race

package admission

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// The allocations of the hot paths, held by tests (the race detector's
// sync.Pool drops items at random, so these build without it; make test
// runs them apart).

// middlewareAllocs is the allocations per request of h serving key's
// requests, the request and writer reused, and the status they got.
func middlewareAllocs(t *testing.T, h http.Handler, key string) (float64, int) {
	t.Helper()
	r := httptest.NewRequest("GET", "/api/v1/users/me", nil)
	r.Header = http.Header{}
	auth := []string{"Bearer " + key}
	w := &benchWriter{h: http.Header{}}
	n := testing.AllocsPerRun(500, func() {
		clear(r.Header)
		r.Header["Authorization"] = auth
		clear(w.h)
		w.status = http.StatusOK
		h.ServeHTTP(w, r)
	})
	return n, w.status
}

// TestMiddlewareAllocs: an admitted request allocates at most 2 times (its
// state and its header text), a 429 at most once (its header text).
func TestMiddlewareAllocs(t *testing.T) {
	g, err := New(testConfig(), benchRegistry(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	if n, status := middlewareAllocs(t, h, "ent-key"); status != http.StatusOK || n > 2 {
		t.Errorf("admitted: status %d, %.1f allocations per request, want 200 and at most 2", status, n)
	}
	fg := floodGate(t)
	fh := fg.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	fh.ServeHTTP(&benchWriter{h: http.Header{}}, flood(t)) // spend the burst
	if n, status := middlewareAllocs(t, fh, "flood-key"); status != http.StatusTooManyRequests || n > 1 {
		t.Errorf("429: status %d, %.1f allocations per request, want 429 and at most 1", status, n)
	}
}
