package redisstore

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/redistest"
)

// newTestStore builds a client and a Store on addrs, both closed when t
// ends. edit adjusts the config (nil keeps the defaults).
func newTestStore(t testing.TB, addrs []string, edit func(*Config), o Options) *Store {
	t.Helper()
	cfg := Config{Addrs: addrs, Cluster: len(addrs) > 1}
	if edit != nil {
		edit(&cfg)
	}
	client, err := NewClient(cfg)
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	t.Cleanup(func() { _ = client.Close() })
	s, err := New(client, cfg, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// scriptCalls returns the EVALSHA and EVAL calls the server has run, from
// INFO commandstats.
func scriptCalls(t testing.TB, srv *redistest.Server) int {
	t.Helper()
	n := 0
	for _, c := range []string{"evalsha", "eval"} {
		n += int(commandStat(t, srv.Addr(), c, "calls"))
	}
	return n
}

// commandStat returns one field (calls, usec, usec_per_call) of a command's
// line in INFO commandstats at addr; zero when the command never ran.
func commandStat(t testing.TB, addr, cmd, field string) float64 {
	t.Helper()
	info, err := redistest.Do(addr, "INFO", "commandstats")
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for kv := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(kv, field+"="); ok {
				f, _ := strconv.ParseFloat(v, 64)
				return f
			}
		}
	}
	return 0
}

// pipelineCounter is a go-redis hook counting pipelines and the commands
// they carry, and single commands.
type pipelineCounter struct {
	pipelines, pipelined, single atomic.Int64
}

func (h *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.single.Add(1)
		return next(ctx, cmd)
	}
}

func (h *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipelines.Add(1)
		h.pipelined.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// checkGoroutines fails t when the goroutine count does not come back to
// base (plus slack) within a few seconds.
func checkGoroutines(t *testing.T, base int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= base+2 {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines: got %d, want <= %d\n%s", n, base+2, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var bigLimit = ratelimit.Limit{Rate: 1e9, Burst: 1e9}

// traffic drives decisions from worker goroutines, paced like request
// traffic, until ended: it counts them by source and keeps the slowest.
type traffic struct {
	t       *testing.T
	stop    atomic.Bool
	wg      sync.WaitGroup
	slowest atomic.Int64
	sources [4]atomic.Int64
}

// startTraffic starts workers goroutines calling decide(w, i) for their
// i-th decision; an error fails t.
func startTraffic(t *testing.T, workers int, decide func(w, i int) (Outcome, error)) *traffic {
	tr := &traffic{t: t}
	for w := range workers {
		tr.wg.Go(func() {
			for i := 0; !tr.stop.Load(); i++ {
				start := time.Now()
				out, err := decide(w, i)
				d := time.Since(start)
				if err != nil {
					t.Errorf("decide: %v", err)
					return
				}
				for cur := tr.slowest.Load(); int64(d) > cur && !tr.slowest.CompareAndSwap(cur, int64(d)); cur = tr.slowest.Load() {
				}
				tr.sources[out.Source].Add(1)
				// Pace like request traffic: workers spinning on instant
				// local decisions would measure the scheduler on two
				// cores, not the store.
				time.Sleep(200 * time.Microsecond)
			}
		})
	}
	return tr
}

// count returns the decisions from src so far.
func (tr *traffic) count(src Source) int64 { return tr.sources[src].Load() }

// waitFor polls cond for up to 5 s, failing the test (after stopping the
// traffic) when it does not hold by then.
func (tr *traffic) waitFor(what string, cond func() bool) {
	tr.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			tr.end()
			tr.t.Fatalf("timed out waiting for %s (redis %d, sync %d, policy %d)", what,
				tr.count(FromRedis), tr.count(FromSync), tr.count(FromPolicy))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// end stops the traffic, waits for it and returns the slowest decision.
func (tr *traffic) end() time.Duration {
	tr.stop.Store(true)
	tr.wg.Wait()
	return time.Duration(tr.slowest.Load())
}
