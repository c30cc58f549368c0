package redisstore

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/redistest"
)

// Rounds of BenchmarkDecisions: every kind runs benchRound per round at
// each number of callers, kinds interleaved, so a machine whose load
// drifts shifts them all alike and their ratios hold within one run.
// FAIRGATE_BENCH_ROUND overrides the round (e.g. 100ms, for a quick look).
const (
	benchRounds = 3
	benchKeys   = 10_000
)

var benchRound = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("FAIRGATE_BENCH_ROUND")); err == nil && d > 0 {
		return d
	}
	return time.Second
}()

// checkRecorded fails b unless redis_rate under l records a decision:
// writes its key.
func checkRecorded(b *testing.B, client redis.UniversalClient, gcra *redis_rate.Limiter, l redis_rate.Limit) {
	ctx := context.Background()
	if _, err := gcra.Allow(ctx, "recorded-check", l); err != nil {
		b.Fatal(err)
	}
	if n, err := client.Exists(ctx, "rate:recorded-check").Result(); err != nil || n != 1 {
		b.Fatalf("redis_rate under %+v does not record a decision (its key: %d, %v)", l, n, err)
	}
}

// BenchmarkDecisions compares, against one redis-server and 10,000 tenant
// keys, decisions per second and latency percentiles at 1, 16, 64 and 256
// concurrent callers for
//
//   - exact: the Redis store with its default config (no override),
//   - sync: the Redis store in sync mode (default sync_interval),
//   - redis_rate: github.com/go-redis/redis_rate/v10 (GCRA, one EVALSHA a
//     decision, unbatched),
//   - evalsha: take.lua run directly with one EVALSHA a decision,
//   - embedded: the in-process MemoryStore (what sync is measured against),
//
// in interleaved rounds, and prints one Markdown table with the share of
// decisions made by the failure policy and Redis's own CPU per decision
// (INFO commandstats: µs inside commands over decisions; and the
// redis-server process's CPU time, I/O included, from /proc). The limit,
// a million a second per key, denies nothing (no denial cache hit) and
// records every decision (checkRecorded). Run it once:
//
//	go test -run '^$' -bench '^BenchmarkDecisions$' -benchtime 1x ./admission/redisstore/
func BenchmarkDecisions(b *testing.B) {
	loadStart, _ := os.ReadFile("/proc/loadavg")
	srv := redistest.StartServer(b)
	addrs := []string{srv.Addr()}
	exact := newTestStore(b, addrs, nil, Options{})
	synced := newTestStore(b, addrs, func(c *Config) { c.Mode = Sync }, Options{})
	client, err := NewClient(Config{Addrs: addrs, PoolSize: 256})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = client.Close() })
	gcra := redis_rate.NewLimiter(client)
	// A million a second per key: high enough that no decision is a
	// denial, low enough that every one is recorded. (At 1e9 a second
	// redis_rate's increment, 1 ns, is lost in its float of seconds since
	// 2017, so it never writes: a decision that records nothing costs
	// Redis half as much.)
	limit := ratelimit.Limit{Rate: 1e6, Burst: 1e6}
	gcraLimit := redis_rate.Limit{Rate: int(limit.Rate), Burst: int(limit.Burst), Period: time.Second}
	checkRecorded(b, client, gcra, gcraLimit)
	embedded := ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{})
	ctx := context.Background()
	if err := takeScript.Load(ctx, client).Err(); err != nil {
		b.Fatal(err)
	}

	keys := make([]ratelimit.BucketKey, benchKeys)
	redisKeys := make([][]string, benchKeys)
	names := make([]string, benchKeys)
	for i := range keys {
		names[i] = fmt.Sprintf("tenant-%d", i)
		keys[i] = ratelimit.BucketKey{Tenant: names[i]}
		redisKeys[i] = []string{bucketKey(keys[i])}
	}
	policyOf := func(s *Store) func() uint64 { return func() uint64 { return s.Stats().Policy } }
	kinds := []benchKind{
		{name: "exact", policy: policyOf(exact), take: func(i int) error {
			_, err := exact.Take(ctx, keys[i%benchKeys], limit, 1)
			return err
		}},
		{name: "sync", policy: policyOf(synced), take: func(i int) error {
			_, err := synced.Take(ctx, keys[i%benchKeys], limit, 1)
			return err
		}},
		{name: "redis_rate", take: func(i int) error {
			_, err := gcra.Allow(ctx, names[i%benchKeys], gcraLimit)
			return err
		}},
		{name: "evalsha", take: func(i int) error {
			return takeScript.EvalSha(ctx, client, redisKeys[i%benchKeys], limit.Rate, limit.Burst, 1).Err()
		}},
		{name: "embedded", take: func(i int) error {
			_, err := embedded.Take(ctx, keys[i%benchKeys], limit, 1)
			return err
		}},
	}
	var table strings.Builder
	fmt.Fprintf(&table, "\n| callers | store | decisions/s | p50 µs | p99 µs | by policy | Redis µs/decision (commands) | Redis CPU µs/decision |\n|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for _, callers := range []int{1, 16, 64, 256} {
		b.Run(fmt.Sprintf("callers=%d", callers), func(b *testing.B) {
			res := make([]benchResult, len(kinds))
			for range benchRounds {
				for i, k := range kinds {
					res[i].add(runRound(b, srv, callers, k))
				}
			}
			for i, k := range kinds {
				r := &res[i]
				b.ReportMetric(r.rate(), k.name+"-decisions/s")
				fmt.Fprintf(&table, "| %d | %s | %.0f | %.1f | %.1f | %s | %s | %s |\n", callers, k.name, r.rate(),
					float64(r.quantile(0.5).Nanoseconds())/1e3, float64(r.quantile(0.99).Nanoseconds())/1e3,
					r.policyShare(k), r.redisPerDecision(k, r.redisUS), r.redisPerDecision(k, r.redisCPU))
			}
			b.ReportMetric(res[0].rate()/res[2].rate(), "exact/redis_rate")
			b.ReportMetric(res[1].rate()/res[0].rate(), "sync/exact")
			b.ReportMetric(res[4].rate()/res[1].rate(), "embedded/sync")
			b.ReportMetric(0, "ns/op")
		})
	}
	loadEnd, _ := os.ReadFile("/proc/loadavg")
	fmt.Fprintf(&table, "\n/proc/loadavg before: %s/proc/loadavg after:  %s", loadStart, loadEnd)
	// Printed, not logged: a parent benchmark's log is not shown.
	fmt.Print(table.String())
}

// benchKind is one store under BenchmarkDecisions.
type benchKind struct {
	name   string
	take   func(i int) error
	policy func() uint64 // decisions by the failure policy so far; nil: none
}

// benchResult accumulates a kind's rounds at one number of callers.
type benchResult struct {
	decisions, policy int64
	elapsed           time.Duration
	redisUS           float64 // Redis's time in commands (INFO commandstats)
	redisCPU          float64 // the redis-server process's CPU time, µs
	lat               []time.Duration
}

func (r *benchResult) add(o benchResult) {
	r.decisions += o.decisions
	r.policy += o.policy
	r.elapsed += o.elapsed
	r.redisUS += o.redisUS
	r.redisCPU += o.redisCPU
	r.lat = append(r.lat, o.lat...)
}

func (r *benchResult) rate() float64 { return float64(r.decisions) / r.elapsed.Seconds() }

func (r *benchResult) quantile(q float64) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	slices.Sort(r.lat)
	return r.lat[int(q*float64(len(r.lat)-1))]
}

func (r *benchResult) policyShare(k benchKind) string {
	if k.policy == nil {
		return "–"
	}
	return fmt.Sprintf("%.3f%%", 100*float64(r.policy)/float64(r.decisions))
}

// redisPerDecision formats us (Redis's µs) per decision.
func (r *benchResult) redisPerDecision(k benchKind, us float64) string {
	if k.name == "embedded" {
		return "–"
	}
	return fmt.Sprintf("%.2f", us/float64(r.decisions))
}

// runRound runs kind k from callers goroutines for benchRound.
func runRound(b *testing.B, srv *redistest.Server, callers int, k benchKind) benchResult {
	if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
		b.Fatal(err)
	}
	var policy0 uint64
	if k.policy != nil {
		policy0 = k.policy()
	}
	_, cpu0, _ := cpuTicks(srv.Pid())
	var next atomic.Int64
	lat := make([][]time.Duration, callers)
	var wg sync.WaitGroup
	start := time.Now()
	for c := range callers {
		wg.Go(func() {
			// Every 16th latency is kept: enough for a p99, and the
			// record costs the fast kinds little.
			for n := 0; time.Since(start) < benchRound; n++ {
				i := int(next.Add(1))
				t0 := time.Now()
				if err := k.take(i); err != nil {
					b.Error(err)
					return
				}
				if n%16 == 0 {
					lat[c] = append(lat[c], time.Since(t0))
				}
			}
		})
	}
	wg.Wait()
	r := benchResult{decisions: next.Load(), elapsed: time.Since(start), lat: slices.Concat(lat...)}
	if k.policy != nil {
		r.policy = int64(k.policy() - policy0)
	}
	r.redisUS = redisCommandUS(b, srv.Addr())
	_, cpu1, _ := cpuTicks(srv.Pid())
	r.redisCPU = float64(cpu1-cpu0) * 1e4 // ticks of 10 ms
	return r
}

// redisCommandUS returns the µs Redis spent in commands since the last
// CONFIG RESETSTAT: the sum of INFO commandstats' usec.
func redisCommandUS(b *testing.B, addr string) float64 {
	info, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	var us float64
	for line := range strings.SplitSeq(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		for kv := range strings.SplitSeq(strings.TrimSpace(line), ",") {
			if v, ok := strings.CutPrefix(kv[strings.IndexByte(kv, ':')+1:], "usec="); ok {
				f, _ := strconv.ParseFloat(v, 64)
				us += f
			}
		}
	}
	return us
}

// BenchmarkSyncTake is sync mode's hot path: a local decision on a view
// that is fresh (10,000 tenants, reconciled in the background).
func BenchmarkSyncTake(b *testing.B) {
	benchmarkTake(b, func(c *Config) { c.Mode = Sync }, 1)
}

// BenchmarkExactTake is exact mode's hot path: a take batched with the
// other goroutines' into pipelines (10,000 tenants, default config; 128
// goroutines on two cores, so that pipelines fill).
func BenchmarkExactTake(b *testing.B) {
	benchmarkTake(b, nil, 64)
}

// benchmarkTake measures Take on a store configured by edit, from
// parallelism × GOMAXPROCS goroutines over 10,000 tenants, each taken
// from once first.
func benchmarkTake(b *testing.B, edit func(*Config), parallelism int) {
	srv := redistest.StartServer(b)
	s := newTestStore(b, []string{srv.Addr()}, edit, Options{})
	ctx := context.Background()
	keys := make([]ratelimit.BucketKey, benchKeys)
	for i := range keys {
		keys[i] = ratelimit.BucketKey{Tenant: fmt.Sprintf("tenant-%d", i)}
		if _, err := s.Take(ctx, keys[i], bigLimit, 1); err != nil {
			b.Fatal(err)
		}
	}
	b.SetParallelism(parallelism)
	b.ReportAllocs()
	b.ResetTimer()
	var seq atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		i := seq.Add(7919)
		for pb.Next() {
			i += 7919
			if _, err := s.Take(ctx, keys[i%benchKeys], bigLimit, 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
