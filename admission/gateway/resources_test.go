package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/memstat"
)

// TestSoakNoisyTenant runs the demo config through the real HTTP server for
// a few seconds: initech (starter) hammers searches from 8 closed-loop
// clients, far over its quota, while acme and globex send paced traffic
// within theirs. Heap and goroutines are measured at two quiet points —
// after a one-second warm-up and after a three-second soak, each time with
// the load stopped and the clients' idle connections closed — and must
// match within a margin: the soak's tens of thousands of requests leave
// nothing behind. RSS is logged, not asserted (the runtime returns memory
// to the OS lazily).
func TestSoakNoisyTenant(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time soak")
	}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("x", 1024))
	}))
	t.Cleanup(api.Close)
	base, _, srv := startGateway(t, func(c *Config) { c.Upstream = api.URL }, Options{})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}, Timeout: 5 * time.Second}
	t.Cleanup(client.CloseIdleConnections) // before the gateway drains

	var mu sync.Mutex
	statuses := map[string]map[int]int{}
	send := func(method, path, key string) {
		req, _ := http.NewRequest(method, base+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		status := 0
		if resp, err := client.Do(req); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			status = resp.StatusCode
		}
		mu.Lock()
		if statuses[key] == nil {
			statuses[key] = map[int]int{}
		}
		statuses[key][status]++
		mu.Unlock()
	}
	load := func(d time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		var wg sync.WaitGroup
		for range 8 { // the noisy neighbour, as fast as it can
			wg.Go(func() {
				for ctx.Err() == nil {
					send("GET", "/api/v1/search", "demo-starter-key")
				}
			})
		}
		wg.Go(func() {
			everyUntil(ctx, 20*time.Millisecond, func() { send("GET", "/api/v1/users/me", "demo-enterprise-key") })
		})
		wg.Go(func() {
			everyUntil(ctx, 500*time.Millisecond, func() { send("GET", "/api/v1/search", "demo-pro-key") })
		})
		wg.Wait()
	}
	// quiet closes the clients' idle connections and waits (bounded) until
	// no request holds a slot or seat and the goroutine count has stopped
	// falling: the server's side of a closed connection ends
	// asynchronously.
	quiet := func() (heap int64, goroutines int) {
		client.CloseIdleConnections()
		deadline := time.Now().Add(2 * time.Second)
		prev := -1
		for {
			time.Sleep(50 * time.Millisecond) // bounded by deadline
			goroutines = runtime.NumGoroutine()
			settled := goroutines == prev
			for _, id := range []string{"acme", "globex", "initech"} {
				if slots, seats := held(t, srv, id); slots != 0 || seats != 0 {
					settled = false
				}
			}
			if settled || time.Now().After(deadline) {
				return memstat.HeapAlloc(), goroutines
			}
			prev = goroutines
		}
	}

	load(time.Second)
	h1, g1 := quiet()
	rss1 := memstat.RSS()
	start := time.Now()
	load(3 * time.Second)
	soak := time.Since(start)
	h2, g2 := quiet()
	rss2 := memstat.RSS()

	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, m := range statuses {
		for _, n := range m {
			total += n
		}
	}
	t.Logf("%d requests (1s warm-up, %v soak); statuses by key: %v", total, soak.Round(time.Millisecond), statuses)
	t.Logf("after warm-up: heap %d B, %d goroutines, RSS %d B; after soak: heap %d B, %d goroutines, RSS %d B",
		h1, g1, rss1, h2, g2, rss2)
	// A leak stays; a connection's goroutines still ending on a loaded
	// machine do not: give them a bounded while before judging.
	for deadline := time.Now().Add(3 * time.Second); g2 > g1+2 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond) // bounded by deadline
		g2 = runtime.NumGoroutine()
	}
	if g2 > g1+2 {
		t.Errorf("goroutines %d -> %d over the soak", g1, g2)
	}
	if margin := h1/4 + 2<<20; h2 > h1+margin {
		t.Errorf("heap %d -> %d B over the soak, more than the %d B margin", h1, h2, margin)
	}
	if noisy := statuses["demo-starter-key"][429]; noisy == 0 {
		t.Errorf("the noisy tenant was never limited: %v", statuses["demo-starter-key"])
	}
	acme := statuses["demo-enterprise-key"]
	if sent := acme[200] + acme[429] + acme[503] + acme[0]; float64(acme[200]) < 0.95*float64(sent) {
		t.Errorf("acme got %d 200s of %d during the noisy neighbour: %v", acme[200], sent, acme)
	}
}
