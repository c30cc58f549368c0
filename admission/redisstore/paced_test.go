package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/redistest"
)

// BenchmarkPaced compares exact and sync mode side by side at a paced
// load, as a gateway sees it: pacedLoad decisions a second in all, spread
// over tenants each asking at 5 or at 500 requests a second (10,000 and
// 100 tenants), from 1 to 256 callers, one redis-server. It prints the
// share of decisions by the failure policy and Redis's CPU per decision
// (the redis-server process, from /proc, and its time in commands, INFO
// commandstats), and sync's over exact's. Run it once:
//
//	go test -run '^$' -bench '^BenchmarkPaced$' -benchtime 1x ./admission/redisstore/
func BenchmarkPaced(b *testing.B) {
	srv := redistest.StartServer(b)
	addrs := []string{srv.Addr()}
	stores := map[string]*Store{
		"exact": newTestStore(b, addrs, nil, Options{}),
		"sync":  newTestStore(b, addrs, func(c *Config) { c.Mode = Sync }, Options{}),
	}
	var table strings.Builder
	fmt.Fprintf(&table, "\n| per tenant /s | tenants | callers | mode | decisions/s | by policy | Redis CPU µs/decision | Redis µs/decision (commands) | sync/exact CPU |\n|---:|---:|---:|---|---:|---:|---:|---:|---:|\n")
	for _, perTenant := range []float64{5, 500} {
		tenants := int(pacedLoad / perTenant)
		keys := make([]ratelimit.BucketKey, tenants)
		for i := range keys {
			keys[i] = ratelimit.BucketKey{Tenant: fmt.Sprintf("paced-%g-%d", perTenant, i)}
		}
		// Every view and key exists before the first round: a first
		// take in sync mode reconciles on the request path.
		for _, s := range stores {
			var wg sync.WaitGroup
			for w := range 64 {
				wg.Go(func() {
					for i := w; i < len(keys); i += 64 {
						if _, _, err := s.Decide(context.Background(), keys[i], bigLimit, 1); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
		}
		for _, callers := range []int{1, 16, 64, 256} {
			b.Run(fmt.Sprintf("per_tenant=%g/callers=%d", perTenant, callers), func(b *testing.B) {
				var cpu [2]float64
				for i, mode := range []string{"exact", "sync"} {
					r := pacedRound(b, srv, stores[mode], keys, callers)
					cpu[i] = r.redisCPU / float64(r.decisions)
					ratio := ""
					if i == 1 {
						ratio = fmt.Sprintf("%.2f", cpu[1]/cpu[0])
					}
					fmt.Fprintf(&table, "| %g | %d | %d | %s | %.0f | %d | %.2f | %.2f | %s |\n", perTenant, tenants, callers, mode,
						r.rate(), r.policy, cpu[i], r.redisUS/float64(r.decisions), ratio)
				}
				b.ReportMetric(cpu[1]/cpu[0], "sync/exact-redis-cpu")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
	fmt.Print(table.String())
}

// pacedLoad is BenchmarkPaced's decisions a second, in all.
const pacedLoad = 50_000

// pacedRound runs s for benchRound at pacedLoad decisions a second from
// callers goroutines, each taking keys in turn.
func pacedRound(b *testing.B, srv *redistest.Server, s *Store, keys []ratelimit.BucketKey, callers int) benchResult {
	if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
		b.Fatal(err)
	}
	policy0 := s.Stats().Policy
	_, cpu0, _ := cpuTicks(srv.Pid())
	ctx := context.Background()
	every := time.Duration(float64(time.Second) * float64(callers) / pacedLoad)
	var mu sync.Mutex
	var decisions int64
	var wg sync.WaitGroup
	start := time.Now()
	for c := range callers {
		wg.Go(func() {
			n := int64(0)
			// Each caller's decisions at their instants: late ones are
			// made at once, so the load holds when a round trip is slow.
			for next := start.Add(every * time.Duration(c) / time.Duration(callers)); time.Since(start) < benchRound; next = next.Add(every) {
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				}
				i := (int(n)*callers + c) % len(keys)
				if _, _, err := s.Decide(ctx, keys[i], bigLimit, 1); err != nil {
					b.Error(err)
					return
				}
				n++
			}
			mu.Lock()
			decisions += n
			mu.Unlock()
		})
	}
	wg.Wait()
	r := benchResult{decisions: decisions, elapsed: time.Since(start), policy: int64(s.Stats().Policy - policy0)}
	r.redisUS = redisCommandUS(b, srv.Addr())
	_, cpu1, _ := cpuTicks(srv.Pid())
	r.redisCPU = float64(cpu1-cpu0) * 1e4
	return r
}
