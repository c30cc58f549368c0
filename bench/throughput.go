package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairgate/fairgate/admission"
	"github.com/fairgate/fairgate/admission/gateway"
	"github.com/fairgate/fairgate/internal/selfsigned"
	"github.com/fairgate/fairgate/tenant"
)

// ThroughputModes are the modes of the throughput scenario, in run order.
// NAME-flood is the flood round (flood.go) with NAME in front of the demo
// API; it runs once a round, not once per connection count.
// fairgate-gc100 is fairgate with the collector at Go's default target
// (server.gc_percent 100) instead of fairgate's (DefaultGCPercent);
// fairgate-fasthttp is fairgate on the opt-in fasthttp engine
// (server.engine) instead of the default net/http.
var ThroughputModes = []string{"direct", "reverseproxy", "fairgate", "fairgate-429", "fairgate-gc100", "fairgate-gc100-429", "fairgate-fasthttp", "fairgate-fasthttp-429",
	"nginx", "nginx-429", "haproxy", "haproxy-429", "fairgate-flood", "fairgate-fasthttp-flood", "nginx-flood",
	"fairgate-anon-flood", "fairgate-body-flood"}

// throughputTenants is how many tenants the proxied load rotates over;
// their quotas never bind.
const throughputTenants = 64

// floodKey is the one key over its quota (fairgate-429).
const floodKey = "throughput-flood-key"

func tenantKey(i int) string { return "throughput-key-" + strconv.Itoa(i) }

// ThroughputOptions configure the throughput scenario.
type ThroughputOptions struct {
	// Binary is the fairgate executable whose bench-server subcommand
	// runs each server.
	Binary string
	// Modes to run; nil means ThroughputModes.
	Modes []string
	// Conns are the closed-loop connection counts; nil means 8 and 64.
	Conns []int
	// Rounds of every mode and connection count, interleaved. Zero: 3.
	Rounds int
	// Duration of one measurement. Zero: 5s.
	Duration time.Duration
	// FloodDuration is each phase of a flood round (quiet, then flood).
	// Zero: 10s.
	FloodDuration time.Duration
	// FloodRate is the flood's requests per second. Zero: FloodRate.
	FloodRate float64
	// Progress, when set, gets a line per measurement.
	Progress io.Writer
	// Wrk makes wrk the load generator instead of the bench's own
	// client (throughput_wrk.go), each mode's server alone on the first
	// core, wrk and the upstream on the second. The flood rounds keep
	// their own open-loop senders.
	Wrk bool
	// H2load makes h2load the load generator, over HTTP/2
	// (throughput_h2load.go), the cores shared as with Wrk: h2c with
	// prior knowledge, or over TLS when TLS is set. Only fairgate (the
	// net/http engine) and nginx (listen … http2) are compared.
	H2load, TLS bool
}

// ThroughputRow is one measurement.
type ThroughputRow struct {
	Round, Conns int
	Mode         string
	// Skipped says why the mode did not run (its binary is missing).
	Skipped string
	// OK and Rejected are answers per second (200s and 429s).
	OK, Rejected float64
	// P50 and P99 latency in milliseconds.
	P50, P99 float64
	// ServerCPU is the server's CPU time (user+system) per answer, in µs;
	// ServerBusy the share of its one core it used. For direct, the
	// upstream is the server. UpstreamCPU is the upstream's, per answer.
	ServerCPU, ServerBusy, UpstreamCPU float64
	// LoadCPU is the load generator's CPU per answer, in µs.
	LoadCPU float64
	Errors  int
}

// ThroughputResult is what the throughput scenario measured.
type ThroughputResult struct {
	Rows   []ThroughputRow
	Floods []FloodRow
}

// Throughput runs the throughput scenario, which measures what one
// request costs each server: a closed loop of o.Conns connections, each
// server a child process on one core (GOMAXPROCS=1), its CPU read from
// /proc/PID/stat. Modes run in interleaved rounds, so a slow moment of a
// shared machine hits all of them, and the ratios are taken within a
// round.
func Throughput(ctx context.Context, o ThroughputOptions) (ThroughputResult, error) {
	if o.Modes == nil {
		o.Modes = ThroughputModes
	}
	if o.Conns == nil {
		o.Conns = []int{8, 64}
	}
	if o.Rounds == 0 {
		o.Rounds = 3
	}
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
	}
	if o.FloodRate == 0 {
		o.FloodRate = FloodRate
	}
	if o.FloodDuration == 0 {
		o.FloodDuration = 10 * time.Second
	}
	var res ThroughputResult
	if o.Wrk || o.H2load {
		gen := "wrk"
		if o.H2load {
			gen = "h2load"
		}
		for _, b := range []string{gen, "taskset"} {
			if _, err := exec.LookPath(b); err != nil {
				return res, fmt.Errorf("bench: --generator %s needs %s (make bench-deps): %w", gen, b, err)
			}
		}
	}
	up, err := startChild(ctx, o.Binary, "upstream", "", nil)
	if err != nil {
		return res, err
	}
	defer up.stop()
	var h2 *h2Listen
	if o.H2load {
		h2 = &h2Listen{}
		if o.TLS {
			dir, err := os.MkdirTemp("", "fairgate-bench-tls")
			if err != nil {
				return res, err
			}
			defer os.RemoveAll(dir)
			if h2.cert, h2.key, _, err = selfsigned.Write(dir, 1); err != nil {
				return res, err
			}
		}
	}
	pinned := o.Wrk || o.H2load
	if pinned {
		if err := pin(ctx, up.cmd.Process.Pid, loadCPU); err != nil {
			return res, err
		}
	}
	servers := map[string]*child{"direct": up}
	if h2 != nil {
		delete(servers, "direct") // the upstream speaks HTTP/1.1 only
	}
	modes, floods := splitFloodModes(o.Modes)
	if len(floods) > 0 {
		stop, err := startFloodServers(ctx, o.Binary, floods, servers)
		defer stop()
		if err != nil {
			return res, err
		}
	}
	for _, m := range modes {
		// NAME-429 floods the one over-quota key at NAME's server.
		name := strings.TrimSuffix(m, "-429")
		if servers[name] == nil {
			var c *child
			switch {
			case h2 != nil && name != "fairgate" && name != "nginx":
				continue // not compared over HTTP/2: reported as skipped
			case name == "reverseproxy", name == "fairgate", name == "fairgate-gc100", name == "fairgate-fasthttp":
				c, err = startChild(ctx, o.Binary, name, up.url, h2)
			case name == "nginx", name == "haproxy":
				if _, lerr := exec.LookPath(name); lerr != nil {
					continue // reported as skipped in every round
				}
				conf := nginxConf
				if name == "haproxy" {
					conf = haproxyConf
				}
				c, err = startExternal(ctx, name, conf, up.url, h2)
			default:
				return res, fmt.Errorf("bench: unknown throughput mode %q", m)
			}
			if err != nil {
				return res, err
			}
			defer c.stop()
			if pinned {
				if err := pin(ctx, c.cmd.Process.Pid, serverCPU); err != nil {
					return res, err
				}
			}
			servers[name] = c
		}
		servers[m] = servers[name]
	}
	for round := 1; round <= o.Rounds; round++ {
		for _, conns := range o.Conns {
			for _, m := range modes {
				row := ThroughputRow{Round: round, Conns: conns, Mode: m}
				srv := servers[m]
				switch {
				case srv == nil && h2 != nil && !strings.HasPrefix(m, "nginx"):
					row.Skipped = "not compared over HTTP/2"
				case srv == nil:
					row.Skipped = skipReason(strings.TrimSuffix(m, "-429"))
				default:
					key, rejecting := tenantKey, strings.HasSuffix(m, "-429")
					if rejecting {
						key = func(int) string { return floodKey }
					}
					switch {
					case o.H2load:
						row, err = measureH2load(ctx, srv, up, conns, o.Duration, key(0), rejecting)
					case o.Wrk:
						keys := []string{floodKey}
						if !rejecting {
							keys = make([]string, throughputTenants)
							for i := range keys {
								keys[i] = tenantKey(i)
							}
						}
						row, err = measureWrk(ctx, srv, up, conns, o.Duration, keys, rejecting)
					default:
						row, err = measure(ctx, srv, up, conns, o.Duration, key)
					}
					if err != nil {
						return res, err
					}
					row.Round, row.Conns, row.Mode = round, conns, m
				}
				res.Rows = append(res.Rows, row)
				if o.Progress != nil {
					fmt.Fprintf(o.Progress, "round %d c%d %-12s %8.0f ok/s %8.0f 429/s  server %6.1f µs/answer (%3.0f%% of its core)  %s\n",
						round, conns, m, row.OK, row.Rejected, row.ServerCPU, row.ServerBusy*100, row.Skipped)
				}
			}
		}
		for _, m := range floods {
			row := FloodRow{Round: round, Mode: m}
			if srv := servers[m]; srv == nil {
				row.Skipped = skipReason(strings.TrimSuffix(m, "-flood"))
			} else if row, err = measureFlood(ctx, srv, o.FloodDuration, o.FloodRate, floodOf(m)); err != nil {
				return res, err
			}
			row.Round, row.Mode = round, m
			res.Floods = append(res.Floods, row)
			if o.Progress != nil {
				fmt.Fprintf(o.Progress, "round %d %-15s flood %6.0f sent/s (%4.1f%% late) %6.0f 429/s  innocent p99 %6.2f ms quiet, %6.2f ms flood (%.2f×)  server %5.1f µs/answer (%3.0f%% of its core)  %s\n",
					round, m, row.Sent, row.Late*100, row.Flood429, row.QuietP99, row.LoudP99, row.Ratio(), row.ServerCPU, row.ServerBusy*100, row.Skipped)
			}
		}
	}
	return res, nil
}

// splitFloodModes separates the flood rounds' modes from the others.
func splitFloodModes(all []string) (modes, floods []string) {
	for _, m := range all {
		if strings.HasSuffix(m, "-flood") {
			floods = append(floods, m)
		} else {
			modes = append(modes, m)
		}
	}
	return modes, floods
}

// startFloodServers starts the demo API and, in front of it, the server of
// each flood mode (nginx's only when installed), into servers. stop stops
// what it started, also after an error.
func startFloodServers(ctx context.Context, bin string, floods []string, servers map[string]*child) (stop func(), err error) {
	var started []*child
	stop = func() {
		for _, c := range slices.Backward(started) {
			c.stop()
		}
	}
	demo, err := startChild(ctx, bin, "demo-upstream", "", nil)
	if err != nil {
		return stop, err
	}
	started = append(started, demo)
	for _, m := range floods {
		var c *child
		switch m {
		case "fairgate-flood", "fairgate-anon-flood", "fairgate-body-flood":
			// One gateway serves the three floods: a key over its quota,
			// no key, and no key with an announced body.
			if c = servers["fairgate-flood"]; c == nil {
				c, err = startChild(ctx, bin, "fairgate-demo", demo.url, nil)
			}
			servers["fairgate-flood"] = c
		case "fairgate-fasthttp-flood":
			c, err = startChild(ctx, bin, "fairgate-demo-fasthttp", demo.url, nil)
		case "nginx-flood":
			if _, lerr := exec.LookPath("nginx"); lerr != nil {
				continue // reported as skipped in every round
			}
			c, err = startExternal(ctx, "nginx", nginxDemoConf, demo.url, nil)
		default:
			return stop, fmt.Errorf("bench: unknown throughput mode %q", m)
		}
		if err != nil {
			return stop, err
		}
		started = append(started, c)
		servers[m] = c
	}
	return stop, nil
}

// measure runs conns closed-loop connections against srv for d, each
// request with key(i) for its i-th request of the connection.
func measure(ctx context.Context, srv, up *child, conns int, d time.Duration, key func(int) string) (ThroughputRow, error) {
	var row ThroughputRow
	var ok, rejected, errs atomic.Int64
	lats := make([][]time.Duration, conns)
	cpu0, up0, self0 := srv.cpu(), up.cpu(), cpuOf(os.Getpid())
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, DisableCompression: true}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			req, _ := http.NewRequestWithContext(ctx, "GET", srv.url+"/api/v1/users/me", nil)
			for i := c; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
				req.Header = http.Header{"Authorization": {"Bearer " + key(i%throughputTenants)}}
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					errs.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				lats[c] = append(lats[c], time.Since(t0))
				switch resp.StatusCode {
				case http.StatusOK:
					ok.Add(1)
				case http.StatusTooManyRequests:
					rejected.Add(1)
				default:
					errs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	if err := ctx.Err(); err != nil {
		return row, err
	}
	all := slices.Concat(lats...)
	slices.Sort(all)
	n := float64(ok.Load() + rejected.Load())
	row.OK, row.Rejected = float64(ok.Load())/wall.Seconds(), float64(rejected.Load())/wall.Seconds()
	row.P50, row.P99 = percentile(all, 0.5), percentile(all, 0.99)
	row.Errors = int(errs.Load())
	serverCPU := srv.cpu() - cpu0
	row.ServerBusy = serverCPU.Seconds() / wall.Seconds()
	if n > 0 {
		row.ServerCPU = float64(serverCPU.Microseconds()) / n
		if srv != up {
			row.UpstreamCPU = float64((up.cpu() - up0).Microseconds()) / n
		}
		row.LoadCPU = float64((cpuOf(os.Getpid()) - self0).Microseconds()) / n
	}
	return row, nil
}

// throughputConfig is the gateway of the throughput scenario: 64 tenants
// whose quotas never bind, and one (floodKey) whose bucket a single
// request empties.
func throughputConfig(upstream string) (gateway.Config, error) {
	cfg := gateway.Config{Upstream: upstream, Listen: "127.0.0.1:0", AdminListen: "127.0.0.1:0",
		Tenants: tenant.Config{Tiers: map[string]tenant.TierConfig{
			"bench": {Rate: 1e9, Burst: 1e12},
			"flood": {Rate: 1e-3, Burst: 1},
		}},
		Admission: admission.Config{Routes: []admission.RouteConfig{{Method: "GET", Path: "/api/v1/users/me", Cost: 1}}},
	}
	for i := range throughputTenants {
		cfg.Tenants.Tenants = append(cfg.Tenants.Tenants, tenant.TenantConfig{ID: "t" + strconv.Itoa(i), Tier: "bench",
			APIKeysSHA256: []string{tenant.HashKey(tenantKey(i))}})
	}
	cfg.Tenants.Tenants = append(cfg.Tenants.Tenants, tenant.TenantConfig{ID: "flood", Tier: "flood",
		APIKeysSHA256: []string{tenant.HashKey(floodKey)}})
	return cfg, nil // gateway.New validates it
}
