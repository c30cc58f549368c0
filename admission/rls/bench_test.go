package rls

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/admission/redisstore"
	"github.com/fairgate/fairgate/internal/redistest"
)

// BenchmarkShouldRateLimit measures decisions a second over loopback gRPC
// with the generated client, at 1, 16, 64 and 256 concurrent callers, on
// the embedded store and on one real redis-server (default Redis store:
// batching and the denial cache on). Each call is one descriptor, one of
// 1024 client addresses, under a limit high enough to admit: the cost
// measured is a decision, not a denial-cache hit.
//
//	go test -run '^$' -bench ShouldRateLimit -benchtime 2s ./admission/rls/
func BenchmarkShouldRateLimit(b *testing.B) {
	rules := mustRules(b, Source{"bench.yaml", []byte("domain: bench\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n")})
	reqs := make([]*rlsv3.RateLimitRequest, 1024)
	for i := range reqs {
		reqs[i] = request("bench", 0, desc("remote_address", "10.0."+strconv.Itoa(i/256)+"."+strconv.Itoa(i%256)))
	}
	stores := []struct {
		name string
		make func(b *testing.B) ratelimit.Store
	}{
		{"embedded", func(*testing.B) ratelimit.Store { return ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{}) }},
		{"redis", func(b *testing.B) ratelimit.Store {
			srv := redistest.StartServer(b)
			cfg := redisstore.Config{Addrs: []string{srv.Addr()}, FailurePolicy: redisstore.FailClosed, Timeout: 100 * time.Millisecond}
			client, err := redisstore.NewClient(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { client.Close() })
			s, err := redisstore.New(client, cfg, redisstore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			return s
		}},
	}
	for _, st := range stores {
		for _, callers := range []int{1, 16, 64, 256} {
			b.Run(fmt.Sprintf("store=%s/callers=%d", st.name, callers), func(b *testing.B) {
				h := start(b, Config{}, rules, Options{Store: st.make(b)})
				// A few connections, as Envoy's workers open: HTTP/2
				// multiplexes the callers on them.
				conns := []rlsv3.RateLimitServiceClient{h.client}
				for range 3 {
					c, err := grpc.NewClient(h.conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()))
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { c.Close() })
					conns = append(conns, rlsv3.NewRateLimitServiceClient(c))
				}
				var next, errs, over atomic.Int64
				call := func(c rlsv3.RateLimitServiceClient) {
					i := next.Add(1)
					resp, err := c.ShouldRateLimit(context.Background(), reqs[i%int64(len(reqs))])
					if err != nil {
						errs.Add(1)
					} else if resp.OverallCode != ok {
						over.Add(1)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				if callers == 1 {
					for b.Loop() {
						call(h.client)
					}
				} else {
					b.SetParallelism(max(1, callers/runtime.GOMAXPROCS(0)))
					var id atomic.Int64
					b.RunParallel(func(pb *testing.PB) {
						c := conns[id.Add(1)%int64(len(conns))]
						for pb.Next() {
							call(c)
						}
					})
				}
				elapsed := time.Since(start)
				n := next.Load()
				b.ReportMetric(float64(n)/elapsed.Seconds(), "decisions/s")
				if errs.Load() > 0 || over.Load() > 0 {
					b.Fatalf("%d errors, %d OVER_LIMIT in %d calls", errs.Load(), over.Load(), n)
				}
			})
		}
	}
}

// BenchmarkDecide is the service's own cost per call, without gRPC: match,
// take (embedded store), statuses and headers.
func BenchmarkDecide(b *testing.B) {
	rules := mustLoad(b, "testdata/nested.yaml")
	svc, err := NewService(Config{}, rules, Options{Store: ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{})})
	if err != nil {
		b.Fatal(err)
	}
	req := request("api", 0, desc("client_id", "bob", "route", "/x"))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDecideDescriptors is the service's cost per call of 10, 100
// and 1000 one-entry descriptors (limits that admit, no gRPC), on the
// embedded store and on the same store seen as a plain Store (one Take
// per bucket, no TakeAll): the second is the service's own work, linear,
// so its ns/descriptor stays about flat; the first adds the store's
// TakeAll, whose check that no bucket is taken twice compares every pair.
// The bound rls.max_descriptors (64 by default) is raised to let the
// large calls in.
func BenchmarkDecideDescriptors(b *testing.B) {
	rules := mustRules(b, Source{"bench.yaml", []byte("domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n")})
	stores := []struct {
		name string
		make func() ratelimit.Store
	}{
		{"embedded", func() ratelimit.Store { return ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{}) }},
		{"take", func() ratelimit.Store { return takeOnly{ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{})} }},
	}
	for _, st := range stores {
		for _, n := range []int{10, 100, 1000} {
			b.Run(fmt.Sprintf("store=%s/descriptors=%d", st.name, n), func(b *testing.B) {
				svc, err := NewService(Config{Limits: Limits{MaxDescriptors: n}}, rules, Options{Store: st.make()})
				if err != nil {
					b.Fatal(err)
				}
				req := request("bench", 0)
				for i := range n {
					req.Descriptors = append(req.Descriptors, desc("user", "u"+strconv.Itoa(i)))
				}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := svc.ShouldRateLimit(context.Background(), req); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/descriptor")
			})
		}
	}
}

// takeOnly is a Store and no more: its TakeAll is hidden.
type takeOnly struct{ ratelimit.Store }
