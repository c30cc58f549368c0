package bench

import (
	"context"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/demoapi"
)

// BenchmarkProxyOverhead sends the same request straight to an upstream
// that answers at once, and through each proxy, closed-loop and in
// parallel: ns/op is the cost of a request, p50-µs and p99-µs its latency.
// The difference between sub-benchmarks is what the proxy adds. (The
// overhead scenario measures the same at half an upstream's capacity,
// open-loop: fairgate bench --scenario overhead.)
func BenchmarkProxyOverhead(b *testing.B) {
	sc, err := Lookup("overhead", 1)
	if err != nil {
		b.Fatal(err)
	}
	sc.Upstream = demoapi.Config{Connections: 1024, Jitter: -1, ServiceTime: map[string]time.Duration{"/": time.Nanosecond}}
	for _, m := range []Mode{Direct, None, Fairgate} {
		b.Run(m.String(), func(b *testing.B) {
			up, err := serve(demoapi.New(sc.Upstream))
			if err != nil {
				b.Fatal(err)
			}
			defer up.close()
			front, err := startFront(context.Background(), m, frontEnv{scenario: &sc, upstream: up.url})
			if err != nil {
				b.Fatal(err)
			}
			defer front.close()
			tr := clientTransport(addrFor(0))
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
			var mu sync.Mutex
			var lat []time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var mine []time.Duration
				for pb.Next() {
					req, _ := http.NewRequest("GET", front.url+"/api/v1/users/me", nil)
					req.Header.Set("Authorization", "Bearer "+sc.Tenants[0].Key)
					t0 := time.Now()
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Errorf("status %d", resp.StatusCode)
						return
					}
					mine = append(mine, time.Since(t0))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			})
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(percentile(lat, 0.5)*1000, "p50-µs")
			b.ReportMetric(percentile(lat, 0.99)*1000, "p99-µs")
		})
	}
}
