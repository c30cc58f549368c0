package redisstore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/redistest"
)

// BenchmarkScaleOut measures a fleet side by side: 1, 2 and 4 gateway
// instances (stores, each with its own client, in this process) on one
// redis-server and on a 3-master cluster, in exact and sync mode, 64
// callers spread over the instances, 10,000 tenants, unpaced. It prints
// decisions/s, the share decided by the failure policy and the Redis
// servers' CPU per decision (their processes', from /proc): the figure a
// fleet's size follows from (bench/PERF.md, "Scale-out"). Run it once:
//
//	go test -run '^$' -bench '^BenchmarkScaleOut$' -benchtime 1x ./admission/redisstore/
func BenchmarkScaleOut(b *testing.B) {
	single := redistest.StartServer(b)
	cluster := redistest.StartCluster(b)
	topologies := []struct {
		name  string
		addrs []string
		pids  []int
	}{
		{"one node", []string{single.Addr()}, []int{single.Pid()}},
		{"3-master cluster", cluster.Addrs(), []int{cluster.Servers[0].Pid(), cluster.Servers[1].Pid(), cluster.Servers[2].Pid()}},
	}
	keys := make([]ratelimit.BucketKey, benchKeys)
	for i := range keys {
		keys[i] = ratelimit.BucketKey{Tenant: fmt.Sprintf("tenant-%d", i)}
	}
	var table strings.Builder
	fmt.Fprintf(&table, "\n| Redis | mode | instances | decisions/s | by policy | Redis CPU µs/decision |\n|---|---|---:|---:|---:|---:|\n")
	for _, topo := range topologies {
		for _, mode := range []Mode{Exact, Sync} {
			for _, n := range []int{1, 2, 4} {
				b.Run(fmt.Sprintf("%s/%v/instances=%d", strings.ReplaceAll(topo.name, " ", "_"), mode, n), func(b *testing.B) {
					stores := make([]*Store, n)
					for i := range stores {
						stores[i] = newTestStore(b, topo.addrs, func(c *Config) { c.Mode = mode }, Options{})
					}
					defer func() {
						for _, s := range stores {
							_ = s.Close()
						}
					}()
					r := scaleOutRound(b, stores, keys, topo.pids)
					perDecision := r.redisCPU / float64(r.decisions)
					fmt.Fprintf(&table, "| %s | %v | %d | %.0f | %.3f%% | %.2f |\n", topo.name, mode, n, r.rate(),
						100*float64(r.policy)/float64(r.decisions), perDecision)
					b.ReportMetric(r.rate(), "decisions/s")
					b.ReportMetric(perDecision, "redis-cpu-µs/decision")
					b.ReportMetric(0, "ns/op")
				})
			}
		}
	}
	fmt.Print(table.String())
}

// scaleOutRound warms every key on every store, then runs 64 callers
// spread over stores for benchRound and measures the Redis processes pids.
func scaleOutRound(b *testing.B, stores []*Store, keys []ratelimit.BucketKey, pids []int) benchResult {
	ctx := context.Background()
	var wg sync.WaitGroup
	for _, s := range stores {
		for w := range 16 {
			wg.Go(func() {
				for i := w; i < len(keys); i += 16 {
					if _, _, err := s.Decide(ctx, keys[i], bigLimit, 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	var policy0 uint64
	for _, s := range stores {
		policy0 += s.Stats().Policy
	}
	_, cpu0, _ := cpuTicks(pids...)
	var next atomic.Int64
	start := time.Now()
	for c := range 64 {
		s := stores[c%len(stores)]
		wg.Go(func() {
			for time.Since(start) < benchRound {
				i := int(next.Add(1))
				if _, _, err := s.Decide(ctx, keys[i%len(keys)], bigLimit, 1); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	r := benchResult{decisions: next.Load(), elapsed: time.Since(start)}
	_, cpu1, _ := cpuTicks(pids...)
	r.redisCPU = float64(cpu1-cpu0) * 1e4
	for _, s := range stores {
		r.policy += int64(s.Stats().Policy)
	}
	r.policy -= int64(policy0)
	return r
}
