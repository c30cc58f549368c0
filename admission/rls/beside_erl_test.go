package rls_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fairgate/fairgate/internal/redistest"
)

// besideERLRule is the one rule both services load: a bucket per tenant
// value, so large that nothing is ever refused (every call a decision
// that records, none a denial either remembers).
const besideERLRule = `domain: bench
descriptors:
  - key: tenant
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
`

// BenchmarkBesideERL runs `fairgate rls` (exact mode) and
// envoyproxy/ratelimit side by side on one Redis, each in its own
// process, asked by one load generator over gRPC: callers spread over 4
// connections, 10,000 tenant values cycled (caller i's n-th call asks
// tenant (i + n·callers) mod 10000). For each caller count it runs
// FAIRGATE_BESIDE_PAIRS pairs (default 6) of FAIRGATE_BENCH_ROUND rounds
// (default 2 s, after 0.5 s of warm-up), the order inside a pair
// alternating, and reports each service's median decisions/s and the
// median of the pairs' ratios. It needs ERL_BIN (ERL's service_cmd, built
// outside the repo: `go build ./src/service_cmd` in its source); without
// it, it skips. It builds ./cmd/fairgate itself.
//
//	ERL_BIN=PATH go test -run '^$' -bench '^BenchmarkBesideERL$' -benchtime 1x ./admission/rls/
func BenchmarkBesideERL(b *testing.B) {
	bin := os.Getenv("ERL_BIN")
	if bin == "" {
		b.Skip("ERL_BIN is not set: set it to envoyproxy/ratelimit's service_cmd")
	}
	if err := checkERLBin(bin); err != nil {
		b.Fatal(err)
	}
	round := 2 * time.Second
	if v := os.Getenv("FAIRGATE_BENCH_ROUND"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatalf("FAIRGATE_BENCH_ROUND: %v", err)
		}
		round = d
	}
	pairs := 6
	if v := os.Getenv("FAIRGATE_BESIDE_PAIRS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("FAIRGATE_BESIDE_PAIRS: %q is not a positive count", v)
		}
		pairs = n
	}
	dir := b.TempDir()
	redis := redistest.StartServer(b)
	ruleDir := filepath.Join(dir, "ratelimit", "config")
	if err := os.MkdirAll(ruleDir, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ruleDir, "bench.yaml"), []byte(besideERLRule), 0o644); err != nil {
		b.Fatal(err)
	}
	erl, err := startERL(bin, dir, erlSettings{runtimeRoot: dir, redisAddr: redis.Addr()})
	if err != nil {
		b.Fatal(err)
	}
	defer erl.stop()
	fg, err := startFairgateRLSProcess(dir, ruleDir, redis.Addr())
	if err != nil {
		b.Fatal(err)
	}
	defer fg.stop()

	services := []struct {
		name string
		addr string
	}{{"erl", erl.conn.Target()}, {"fairgate", fg.addr}}
	var table strings.Builder
	table.WriteString("| callers | ERL decisions/s (median) | fairgate decisions/s (median) | fairgate ÷ ERL: median of pairs (range) |\n|---:|---:|---:|---:|\n")
	for range b.N {
		for _, callers := range []int{1, 16, 64, 256} {
			rates := map[string][]float64{}
			var ratios []float64
			for p := range pairs {
				got := map[string]float64{}
				for i := range services {
					s := services[(i+p)%2] // the order alternates
					r, err := driveRLS(s.addr, callers, round)
					if err != nil {
						b.Fatalf("%s at %d callers: %v", s.name, callers, err)
					}
					got[s.name] = r
					rates[s.name] = append(rates[s.name], r)
				}
				ratios = append(ratios, got["fairgate"]/got["erl"])
			}
			slices.Sort(ratios)
			med := median(ratios)
			b.ReportMetric(med, "fairgate/erl-"+strconv.Itoa(callers))
			fmt.Fprintf(&table, "| %d | %.0f | %.0f | %.3f (%.2f–%.2f) |\n", callers,
				median(sorted(rates["erl"])), median(sorted(rates["fairgate"])), med, ratios[0], ratios[len(ratios)-1])
		}
	}
	b.Log("\n" + table.String())
}

func sorted(v []float64) []float64 {
	v = slices.Clone(v)
	slices.Sort(v)
	return v
}

// median of sorted v.
func median(v []float64) float64 {
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}

// driveRLS asks the service at addr from callers goroutines over 4
// connections for 0.5 s unmeasured, then for d, and returns the decisions
// a second. Any error or non-OK answer fails the round.
func driveRLS(addr string, callers int, d time.Duration) (float64, error) {
	const conns, tenants = 4, 10_000
	clients := make([]rlsv3.RateLimitServiceClient, conns)
	for i := range clients {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return 0, err
		}
		defer c.Close()
		clients[i] = rlsv3.NewRateLimitServiceClient(c)
	}
	reqs := make([]*rlsv3.RateLimitRequest, tenants)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench", HitsAddend: 1, Descriptors: []*commonrl.RateLimitDescriptor{{
			Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "tenant", Value: "tenant-" + strconv.Itoa(i)}},
		}}}
	}
	var counting atomic.Bool
	var count atomic.Int64
	var firstErr atomic.Value
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			cl := clients[c%conns]
			for n := 0; ctx.Err() == nil; n++ {
				cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
				resp, err := cl.ShouldRateLimit(cctx, reqs[(c+n*callers)%tenants])
				ccancel()
				if ctx.Err() != nil {
					return
				}
				if err == nil && resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					err = fmt.Errorf("answer %v", resp.GetOverallCode())
				}
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				if counting.Load() {
					count.Add(1)
				}
			}
		})
	}
	time.Sleep(500 * time.Millisecond) // warm-up: connections, pools, stacks
	start := time.Now()
	counting.Store(true)
	time.Sleep(d) // the measured round
	counting.Store(false)
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return 0, err
	}
	return float64(count.Load()) / elapsed.Seconds(), nil
}

// fgProc is a `fairgate rls` process.
type fgProc struct {
	cmd    *exec.Cmd
	exited chan error
	addr   string
}

// startFairgateRLSProcess builds ./cmd/fairgate into dir and runs
// `fairgate rls` on ruleDir and redisAddr (exact mode), on free loopback
// ports, returning once /readyz answers 200.
func startFairgateRLSProcess(dir, ruleDir, redisAddr string) (*fgProc, error) {
	bin := filepath.Join(dir, "fairgate")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/fairgate")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go build ./cmd/fairgate: %v\n%s", err, out)
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	admin := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
	cfg := fmt.Sprintf("admin_listen: %s\nrls:\n  listen: %s\n  configs: [%s]\nredis:\n  addrs: [%s]\n  mode: exact\n", admin, addr, ruleDir, redisAddr)
	cfgPath := filepath.Join(dir, "fairgate-rls.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "fairgate.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "rls", "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	erlProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &fgProc{cmd: cmd, exited: make(chan error, 1), addr: addr}
	go func() { p.exited <- cmd.Wait() }()
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(erlStartWait)
	for {
		if resp, err := hc.Get("http://" + admin + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		select {
		case err := <-p.exited:
			b, _ := os.ReadFile(filepath.Join(dir, "fairgate.log"))
			return nil, fmt.Errorf("fairgate rls exited (%v): %s", err, lastLines(string(b), 5))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("fairgate rls: not ready within %v", erlStartWait)
		}
	}
}

func (p *fgProc) stop() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}
