package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fairgate/fairgate/tenant"
)

// fairnessConfig is a config that is not the demo's: two tiers of two
// tenants each, a global backstop below the gold tenants' own quota, and
// a pool per tier on an upstream of 4 connections.
const fairnessConfig = `
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
upstream: %s
tiers:
  gold:   {rate: 400, burst: 400}
  silver: {rate: 2000, burst: 2000, max_concurrent: 50}
routes:
  - {method: GET, path: "/v2/things/{id}", cost: 1}
  - {method: GET, path: /v2/search, cost: 2}
global: {rate: 150, burst: 150}
bulkhead:
  total: 4
  pools:
    gold:   {share: 1, queue_length: 8, max_wait: 1s}
    silver: {share: 1, queue_length: 16, max_wait: 1s}
shedding: {calibration_interval: 500ms}
tenants:
  - {id: big,   tier: gold,   api_keys_sha256: [%s]}
  - {id: small, tier: gold,   api_keys_sha256: [%s]}
  - {id: loud,  tier: silver, api_keys_sha256: [%s]}
  - {id: quiet, tier: silver, api_keys_sha256: [%s]}
`

// startServe runs `fairgate serve --config FILE` in-process on cfg and
// returns the gateway's base URL once it listens.
func startServe(t *testing.T, cfg string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "fairness.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- serve(ctx, []string{"--config", path, "--drain", "1s"}, pw) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		pw.Close()
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var rec struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == "fairgate listening" {
				addr <- rec.Addr
			}
		}
	}()
	select {
	case a := <-addr:
		return "http://" + a
	case err := <-done:
		done <- nil // for the cleanup
		t.Fatalf("serve ended before listening: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not listen within 10s")
	}
	return ""
}

// openLoop sends GET path with key every period until d has passed (an
// open loop: arrivals do not wait for answers) and counts the statuses.
func openLoop(ctx context.Context, client *http.Client, url, key string, every, d time.Duration) map[int]int {
	var mu sync.Mutex
	counts := map[int]int{}
	var wg sync.WaitGroup
	tick := time.NewTicker(every)
	defer tick.Stop()
	for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
			req.Header.Set("Authorization", "Bearer "+key)
			status := 0
			if resp, err := client.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				status = resp.StatusCode
			}
			mu.Lock()
			counts[status]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return counts
}

func okShare(c map[int]int) float64 {
	n := 0
	for _, v := range c {
		n += v
	}
	return float64(c[200]) / float64(max(n, 1))
}

// TestServeFairSharedLayers runs issue 11's first two situations through
// `fairgate serve` with a config of its own and open-loop clients: a gold
// tenant inside its own quota but above the global rate beside a light one
// (the backstop squeeze), and a silver tenant flooding its pool inside its
// rate quota beside a quiet one (the same-tier flood). The light and quiet
// tenants keep ≥ 99%; the heavy ones are refused by the layer in question,
// so the check is not vacuous. Each has its negative control: the light
// traffic sent with the heavy tenant's key, which no layer can then tell
// from the flood, loses requests. (Those with the unfair backstop and
// share-blind shedding are the deterministic tests in admission and
// internal/fairshare.)
func TestServeFairSharedLayers(t *testing.T) {
	if testing.Short() {
		t.Skip("real-time open-loop traffic")
	}
	// 4 connections, 10 ms a request: 400 requests a second.
	sem := make(chan struct{}, 4)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sem <- struct{}{}
		defer func() { <-sem }()
		time.Sleep(10 * time.Millisecond)
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	keys := []string{"big-key", "small-key", "loud-key", "quiet-key"}
	base := startServe(t, fmt.Sprintf(fairnessConfig, up.URL, tenant.HashKey(keys[0]), tenant.HashKey(keys[1]),
		tenant.HashKey(keys[2]), tenant.HashKey(keys[3])))
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	defer client.CloseIdleConnections()
	ctx := t.Context()

	for _, tc := range []struct {
		name                 string
		heavyPath, lightPath string
		heavy, light         string
		lightEvery           time.Duration
	}{
		// big: 250 tokens/s, inside its 400 but above the global 150;
		// small: 20 tokens/s.
		{"backstop", "/v2/things/1", "/v2/things/2", "big", "small", 50 * time.Millisecond},
		// loud: 250 searches/s (2.5 s of connection time a second against
		// the silver pool's 2 seats), inside its 2000 tokens/s; quiet: 10/s.
		{"same-tier", "/v2/search", "/v2/search", "loud", "quiet", 100 * time.Millisecond},
	} {
		play := func(lightKey string) (heavy, light map[int]int) {
			var wg sync.WaitGroup
			wg.Go(func() {
				heavy = openLoop(ctx, client, base+tc.heavyPath, tc.heavy+"-key", 4*time.Millisecond, 4*time.Second)
			})
			wg.Go(func() {
				light = openLoop(ctx, client, base+tc.lightPath, lightKey, tc.lightEvery, 4*time.Second)
			})
			wg.Wait()
			return heavy, light
		}
		t.Run(tc.name, func(t *testing.T) {
			heavy, light := play(tc.light + "-key")
			t.Logf("%s %v, %s %v", tc.heavy, heavy, tc.light, light)
			if okShare(light) < 0.99 {
				t.Errorf("%s tenant within its share: %.1f%% served (%v), want ≥ 99%%", tc.light, 100*okShare(light), light)
			}
			if heavy[503] == 0 {
				t.Errorf("%s tenant was never refused: %v", tc.heavy, heavy)
			}
		})
		// The negative control: the light traffic sent with the heavy
		// tenant's key, so that no layer can tell it from the flood,
		// loses requests like the flood's own.
		t.Run(tc.name+" control", func(t *testing.T) {
			_, light := play(tc.heavy + "-key")
			t.Logf("%s's light traffic %v", tc.heavy, light)
			if okShare(light) >= 0.99 {
				t.Errorf("light traffic of the heavy tenant: %.1f%% served (%v); the test above cannot fail", 100*okShare(light), light)
			}
		})
	}
}
