package redisstore

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/redistest"
)

// BenchmarkDecisions compares, against one redis-server, decisions per
// second and latency percentiles at 1, 16, 64 and 256 concurrent callers
// for the batched store, the unbatched store (one EVALSHA per decision) and
// github.com/go-redis/redis_rate/v10 (GCRA, one EVALSHA per decision).
// Limits are high so every decision reaches Redis (no denial cache hit).
// Metrics: decisions/s, p50-µs, p99-µs, script-µs/call (Redis's own time per
// script call, from INFO commandstats) and policy/op (decisions the store
// could not get from Redis within its timeout: 1s, except batched-5ms,
// which has the default 5ms and shows how often saturation misses it).
func BenchmarkDecisions(b *testing.B) {
	srv := redistest.StartServer(b)
	addrs := []string{srv.Addr()}
	var policy atomic.Int64
	o := Options{OnPolicy: func(FailurePolicy, error) { policy.Add(1) }}
	batched := newTestStore(b, addrs, func(c *Config) { c.Timeout = time.Second }, o)
	unbatched := newTestStore(b, addrs, func(c *Config) { c.Timeout = time.Second; c.Batch.Disabled = true }, o)
	// The default 5ms timeout: policy/op shows how many decisions miss it.
	batched5ms := newTestStore(b, addrs, nil, o)
	client, err := NewClient(Config{Addrs: addrs})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = client.Close() })
	gcra := redis_rate.NewLimiter(client)
	gcraLimit := redis_rate.PerSecond(1_000_000_000)

	tenants := make([]string, 1024)
	for i := range tenants {
		tenants[i] = fmt.Sprintf("tenant-%d", i)
	}
	kinds := []struct {
		name string
		take func(ctx context.Context, i int) error
	}{
		{"batched", func(ctx context.Context, i int) error {
			_, err := batched.Take(ctx, ratelimit.BucketKey{Tenant: tenants[i%len(tenants)]}, bigLimit, 1)
			return err
		}},
		{"batched-5ms", func(ctx context.Context, i int) error {
			_, err := batched5ms.Take(ctx, ratelimit.BucketKey{Tenant: tenants[i%len(tenants)]}, bigLimit, 1)
			return err
		}},
		{"unbatched", func(ctx context.Context, i int) error {
			_, err := unbatched.Take(ctx, ratelimit.BucketKey{Tenant: tenants[i%len(tenants)]}, bigLimit, 1)
			return err
		}},
		{"redis_rate", func(ctx context.Context, i int) error {
			_, err := gcra.Allow(ctx, tenants[i%len(tenants)], gcraLimit)
			return err
		}},
	}
	for _, callers := range []int{1, 16, 64, 256} {
		for _, k := range kinds {
			b.Run(fmt.Sprintf("callers=%d/%s", callers, k.name), func(b *testing.B) {
				policy.Store(0)
				if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
					b.Fatal(err)
				}
				runCallers(b, callers, k.take)
				b.ReportMetric(commandStat(b, srv.Addr(), "evalsha", "usec_per_call"), "script-µs/call")
				b.ReportMetric(float64(policy.Load())/float64(b.N), "policy/op")
			})
		}
	}
}

// runCallers runs b.N decisions from callers goroutines and reports
// decisions/s and the 50th and 99th latency percentiles.
func runCallers(b *testing.B, callers int, take func(ctx context.Context, i int) error) {
	b.ReportAllocs()
	var next atomic.Int64
	lat := make([][]time.Duration, callers)
	var wg sync.WaitGroup
	ctx := context.Background()
	b.ResetTimer()
	start := time.Now()
	for c := range callers {
		lat[c] = make([]time.Duration, 0, b.N/callers+1)
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > b.N {
					return
				}
				t0 := time.Now()
				if err := take(ctx, i); err != nil {
					b.Error(err)
					return
				}
				lat[c] = append(lat[c], time.Since(t0))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	all := slices.Concat(lat...)
	slices.Sort(all)
	if len(all) == 0 {
		return
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(all[len(all)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(0, "ns/op")
}
