package bench

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fairgate/fairgate/admission/gateway"
	"github.com/fairgate/fairgate/deploy/examples"
)

// Demo keys of deploy/examples/demo.yaml.
const (
	// demoFloodKey is initech's (starter: 5 tokens/s, burst 25): the
	// flood is almost all over its quota.
	demoFloodKey = "demo-starter-key"
	// demoInnocentKey is acme's (enterprise: 100 tokens/s, burst 500).
	demoInnocentKey = "demo-enterprise-key"
	// demoPath is the route both send: GET users/me, cost 1, 5 ms mean
	// at the demo API.
	demoPath = "/api/v1/users/me"
)

// Flood round defaults.
const (
	// FloodRate is the flood's requests per second (the 8,000).
	FloodRate = 8000
	// InnocentRate is the innocent tenant's requests per second: half
	// its quota, and with the flood's 5/s admitted below the demo's
	// global backstop (100/s), so only the flood can make it suffer.
	InnocentRate = 50
	// floodConns and innocentConns are the keep-alive connections each
	// sender spreads its schedule over.
	floodConns    = 64
	innocentConns = 8
	// lateAfter is how far behind its scheduled time a send may start
	// and still count as on time.
	lateAfter = time.Millisecond
)

// FloodRow is one flood round of one server. The flood round of the
// throughput scenario is the isolation check on the demo: the
// gateway with deploy/examples/demo.yaml (one core, as every server here)
// in front of the demo API, an innocent tenant sending at a modest steady
// rate (InnocentRate), measured alone ("quiet") and while one over-quota
// key floods FloodRate requests a second ("flood"). Both senders are open
// loop: each request has its time on a fixed schedule and its latency
// counts from that time, so a server that falls behind cannot slow the
// senders down and hide it (coordinated omission).
type FloodRow struct {
	Round int
	// Mode is fairgate-flood, fairgate-fasthttp-flood or nginx-flood (an
	// over-quota key's flood), fairgate-anon-flood (no key) or
	// fairgate-body-flood (no key, a body announced and never sent).
	Mode string
	// Skipped says why the mode did not run (its binary is missing).
	Skipped string
	// Target is the flood's scheduled rate; Sent the rate its sends
	// started at; Late the share of them that started more than 1 ms
	// after their scheduled time and LagP99 the 99th percentile of that
	// lag in ms (the generator's own check).
	Target, Sent, Late, LagP99 float64
	// Flood429 and FloodOK are the flood's answers per second by status;
	// FloodOther counts its other statuses (503s of the starter pool
	// when the flood's burst of admitted requests finds it full) and
	// transport errors ("error"), by status.
	Flood429, FloodOK float64
	FloodOther        map[string]int
	// The innocent tenant's latency percentiles in ms, from each
	// request's scheduled time, alone (Quiet) and during the flood
	// (Loud), over QuietN and LoudN requests; InnocentBad counts its
	// answers other than 200 in both phases.
	QuietP50, QuietP99, LoudP50, LoudP99 float64
	QuietN, LoudN, InnocentBad           int
	// ServerCPU is the server's CPU per answer during the flood phase,
	// in µs; ServerBusy the share of its one core it used then. LoadCPU
	// is the generator's (this process's) CPU per request sent then.
	ServerCPU, ServerBusy, LoadCPU float64
}

// Ratio is the innocent tenant's p99 during the flood over its quiet p99:
// the issue asks for at most 3.
func (r FloodRow) Ratio() float64 {
	if r.QuietP99 <= 0 {
		return 0
	}
	return r.LoudP99 / r.QuietP99
}

// paced is an open-loop sender: n requests of GET url with key (none when
// empty), request i scheduled at start + i/rate, spread over conns
// keep-alive connections (request i on connection i mod conns). A
// connection that is behind sends its next request at once. With body
// set, each request is a POST announcing body bytes that sends one and
// then nothing until its answer has come.
type paced struct {
	url, key string
	rate     float64
	n, conns int
	body     int64
}

// floodKind is what a flood round's flood sends.
type floodKind struct {
	key  string // "": no credential
	body int64  // > 0: a POST announcing this many bytes, one sent
}

// floodOf is the flood of mode: an over-quota key's GETs; no key
// (anon-flood); or no key and a body of max_body_bytes announced
// (body-flood, the demo's 1 MiB).
func floodOf(mode string) floodKind {
	switch {
	case strings.HasSuffix(mode, "-anon-flood"):
		return floodKind{}
	case strings.HasSuffix(mode, "-body-flood"):
		return floodKind{body: 1 << 20}
	}
	return floodKind{key: demoFloodKey}
}

// stalledBody is a request body that sends one byte and then nothing
// until done is closed.
type stalledBody struct {
	sent bool
	done <-chan struct{}
}

func (b *stalledBody) Read(p []byte) (int, error) {
	if !b.sent && len(p) > 0 {
		b.sent = true
		p[0] = 'x'
		return 1, nil
	}
	<-b.done
	return 0, context.Canceled
}

// pacedResult is what a paced sender saw.
type pacedResult struct {
	// byStatus counts answers by status code; status 0 counts
	// transport errors.
	byStatus map[int]int
	// sent counts the requests started, lastStart is when the last one
	// started (from start), lag how far behind its schedule each one
	// started.
	sent      int
	lastStart time.Duration
	lag       []time.Duration
	// lat is every answered request's latency from its scheduled time.
	lat []time.Duration
}

// at is request i's scheduled time after the start.
func (p paced) at(i int) time.Duration {
	return time.Duration(float64(i) * float64(time.Second) / p.rate)
}

// sendRate is the rate the requests were started at: the sent requests
// over the time from the start to the last start, plus one interval (a
// sender exactly on schedule gets p.rate).
func (p paced) sendRate(r pacedResult) float64 {
	if r.sent == 0 {
		return 0
	}
	return float64(r.sent) / (r.lastStart + p.at(1)).Seconds()
}

// run sends p's requests from start on and returns when all are
// answered or ctx is done.
func (p paced) run(ctx context.Context, start time.Time) pacedResult {
	parts := make([]pacedResult, p.conns)
	var wg sync.WaitGroup
	for c := range p.conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			parts[c] = p.runConn(ctx, start, c)
		}()
	}
	wg.Wait()
	return mergePaced(parts)
}

// runConn sends requests c, c+conns, … on one connection.
func (p paced) runConn(ctx context.Context, start time.Time, c int) pacedResult {
	r := pacedResult{byStatus: map[int]int{}}
	tr := &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for i := c; i < p.n && ctx.Err() == nil; i += p.conns {
		at := start.Add(p.at(i))
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		t0 := time.Now()
		r.sent++
		r.lag = append(r.lag, max(t0.Sub(at), 0))
		r.lastStart = max(r.lastStart, t0.Sub(start))
		rctx, cancel := context.WithCancel(ctx)
		method, body := "GET", io.Reader(nil)
		if p.body > 0 {
			method, body = "POST", &stalledBody{done: rctx.Done()}
		}
		req, err := http.NewRequestWithContext(rctx, method, p.url, body)
		if err != nil {
			cancel()
			r.byStatus[0]++
			continue
		}
		if p.body > 0 {
			req.ContentLength = p.body
		}
		if p.key != "" {
			req.Header["Authorization"] = []string{"Bearer " + p.key}
		}
		resp, err := client.Do(req)
		if err != nil {
			cancel()
			r.byStatus[0]++
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		cancel()
		r.lat = append(r.lat, time.Since(at))
		r.byStatus[resp.StatusCode]++
	}
	return r
}

// mergePaced adds up the connections' results; lat comes out sorted.
func mergePaced(parts []pacedResult) pacedResult {
	r := pacedResult{byStatus: map[int]int{}}
	for _, p := range parts {
		for s, n := range p.byStatus {
			r.byStatus[s] += n
		}
		r.sent += p.sent
		r.lastStart = max(r.lastStart, p.lastStart)
		r.lat = append(r.lat, p.lat...)
		r.lag = append(r.lag, p.lag...)
	}
	slices.Sort(r.lat)
	slices.Sort(r.lag)
	return r
}

// late is the share of the requests that started more than lateAfter
// behind schedule (lag sorted).
func (r pacedResult) late() float64 {
	if len(r.lag) == 0 {
		return 0
	}
	i, _ := slices.BinarySearch(r.lag, lateAfter+1)
	return float64(len(r.lag)-i) / float64(len(r.lag))
}

// others counts the answers whose status is not one of ok, by status
// ("error" for transport errors).
func (r pacedResult) others(ok ...int) map[string]int {
	m := map[string]int{}
	for s, c := range r.byStatus {
		switch {
		case slices.Contains(ok, s):
		case s == 0:
			m["error"] += c
		default:
			m[strconv.Itoa(s)] += c
		}
	}
	return m
}

// count is the total of m's counts.
func count(m map[string]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// formatCounts writes m as "503×21, error×1" in key order, or "0".
func formatCounts(m map[string]int) string {
	if len(m) == 0 {
		return "0"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"×"+strconv.Itoa(m[k]))
	}
	return strings.Join(parts, ", ")
}

// measureFlood runs one flood round against srv: the innocent tenant alone
// for d, then the innocent tenant and the flood together for d.
func measureFlood(ctx context.Context, srv *child, d time.Duration, rate float64, kind floodKind) (FloodRow, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*d+30*time.Second)
	defer cancel()
	url := srv.url + demoPath
	innocent := paced{url: url, key: demoInnocentKey, rate: InnocentRate, n: int(InnocentRate * d.Seconds()), conns: innocentConns}
	flood := paced{url: url, key: kind.key, body: kind.body, rate: rate, n: int(rate * d.Seconds()), conns: floodConns}
	quiet := innocent.run(ctx, time.Now())
	if err := ctx.Err(); err != nil {
		return FloodRow{}, err
	}
	cpu0, self0 := srv.cpu(), cpuOf(os.Getpid())
	start := time.Now()
	var loud, fl pacedResult
	var wg sync.WaitGroup
	wg.Go(func() { loud = innocent.run(ctx, start) })
	wg.Go(func() { fl = flood.run(ctx, start) })
	wg.Wait()
	wall := time.Since(start)
	if err := ctx.Err(); err != nil {
		return FloodRow{}, err
	}
	row := FloodRow{Target: rate, Sent: flood.sendRate(fl), Late: fl.late(), LagP99: percentile(fl.lag, 0.99),
		Flood429: float64(fl.byStatus[http.StatusTooManyRequests]) / wall.Seconds(),
		FloodOK:  float64(fl.byStatus[http.StatusOK]) / wall.Seconds(), FloodOther: fl.others(http.StatusOK, http.StatusTooManyRequests),
		QuietP50: percentile(quiet.lat, 0.5), QuietP99: percentile(quiet.lat, 0.99), QuietN: len(quiet.lat),
		LoudP50: percentile(loud.lat, 0.5), LoudP99: percentile(loud.lat, 0.99), LoudN: len(loud.lat),
		InnocentBad: count(quiet.others(http.StatusOK)) + count(loud.others(http.StatusOK))}
	serverCPU := srv.cpu() - cpu0
	row.ServerBusy = serverCPU.Seconds() / wall.Seconds()
	if n := len(fl.lat) + len(loud.lat); n > 0 {
		row.ServerCPU = float64(serverCPU.Microseconds()) / float64(n)
	}
	if n := fl.sent + loud.sent; n > 0 {
		row.LoadCPU = float64((cpuOf(os.Getpid()) - self0).Microseconds()) / float64(n)
	}
	return row, nil
}

// demoConfig is the gateway of the flood round: deploy/examples/demo.yaml
// in front of upstream.
func demoConfig(upstream string) (gateway.Config, error) {
	cfg, err := gateway.Parse(examples.Demo)
	if err != nil {
		return cfg, fmt.Errorf("bench: deploy/examples/demo.yaml: %w", err)
	}
	cfg.Upstream, cfg.Listen, cfg.AdminListen = upstream, "127.0.0.1:0", "127.0.0.1:0"
	return cfg, nil
}

// nginxDemoConf is nginx in front of the demo API with demo.yaml's tier
// quotas as limit_req zones keyed by the Authorization header (a burst of
// nodelay requests is a token bucket of that size). The demo config's
// global backstop, pools and adaptive limit have no nginx counterpart.
const nginxDemoConf = nginxHead + `  map $http_authorization $enterprise { "Bearer demo-enterprise-key" $http_authorization; default ""; }
  map $http_authorization $pro { "Bearer demo-pro-key" $http_authorization; default ""; }
  map $http_authorization $starter { "Bearer demo-starter-key" $http_authorization; default ""; }
  limit_req_zone $enterprise zone=enterprise:1m rate=100r/s;
  limit_req_zone $pro zone=pro:1m rate=20r/s;
  limit_req_zone $starter zone=starter:1m rate=5r/s;
` + nginxLocation + `      limit_req zone=enterprise burst=500 nodelay;
      limit_req zone=pro burst=100 nodelay;
      limit_req zone=starter burst=25 nodelay;
` + nginxTail

// WriteFlood writes the flood rounds as a Markdown table.
func WriteFlood(w io.Writer, rows []FloodRow) error {
	var b strings.Builder
	rate := float64(FloodRate)
	for _, r := range rows {
		if r.Target > 0 {
			rate = r.Target
		}
	}
	fmt.Fprintf(&b, "Flood on the demo config at %.0f/s: one over-quota key (%s; fairgate-anon-flood: no key; fairgate-body-flood: no key and a body announced), the innocent tenant (%s) at %d/s on %s; latency from each request's scheduled time.\n\n",
		rate, demoFloodKey, demoInnocentKey, InnocentRate, demoPath)
	b.WriteString("| round | server | flood sent/s (late >1 ms, lag p99 ms) | flood 429/s | flood 200/s | flood other | innocent p50 / p99 ms quiet | innocent p50 / p99 ms flood | p99 flood ÷ quiet | innocent n quiet / flood, not 200 | server CPU µs/answer (core busy) | load gen CPU µs/req |\n")
	b.WriteString("|---:|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		if r.Skipped != "" {
			fmt.Fprintf(&b, "| %d | %s | skipped: %s ||||||||||\n", r.Round, r.Mode, r.Skipped)
			continue
		}
		fmt.Fprintf(&b, "| %d | %s | %.0f (%.1f%%, %.2f) | %.0f | %.1f | %s | %.2f / %.2f | %.2f / %.2f | %.2f× | %d / %d, %d | %.1f (%.0f%%) | %.1f |\n",
			r.Round, r.Mode, r.Sent, r.Late*100, r.LagP99, r.Flood429, r.FloodOK, formatCounts(r.FloodOther), r.QuietP50, r.QuietP99,
			r.LoudP50, r.LoudP99, r.Ratio(), r.QuietN, r.LoudN, r.InnocentBad, r.ServerCPU, r.ServerBusy*100, r.LoadCPU)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
