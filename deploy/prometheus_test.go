package deploy_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/admission"
	"github.com/fairgate/fairgate/admission/gateway"
	"github.com/fairgate/fairgate/admission/redisstore"
	"github.com/fairgate/fairgate/internal/redistest"
)

// TestPrometheusQueries runs a real Prometheus (Debian's `prometheus`)
// scraping a gateway on a real Redis every second, with the shipped alert
// rules loaded, under a short mixed load: admitted requests, a tenant
// flooding its quota (429), a flood into a small global backstop (503),
// unknown keys (401), a failed reload. Then every Grafana panel's query
// must return data, and the alerts the load provokes must be pending or
// firing (their `for` has not run out in a test): FairgateTenantThrottled,
// FairgateOverloaded, FairgateConfigReloadFailed. Every other alert's
// expression must be valid and every metric it names scraped. The results
// are listed in the test's output.
func TestPrometheusQueries(t *testing.T) {
	promBin := prometheusTool(t, "prometheus")
	rdb := redistest.StartServer(t)
	gw, admin, srv := demoGateway(t, func(cfg *gateway.Config) {
		cfg.Admission.Global = &admission.GlobalConfig{Rate: 20, Burst: 20}
		cfg.Redis = &redisstore.Config{Addrs: []string{rdb.Addr()}, Timeout: time.Second}
	})

	prom := startPrometheus(t, promBin, strings.TrimPrefix(admin.URL, "http://"))
	// The load, bounded: six rounds a second apart, so that every rate()
	// window holds several scrapes.
	get := func(path, key string) {
		req, _ := http.NewRequest("GET", gw.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	for round := range 6 {
		for range 40 {
			get("/api/v1/search", "demo-starter-key") // initech: 429 past its 25 tokens
		}
		for range 60 {
			get("/api/v1/users/me", "demo-enterprise-key") // acme: into the backstop, 503
		}
		for range 3 {
			get("/api/v1/users/me", "demo-pro-key")
			get("/api/v1/users/me", "not-a-key")
		}
		if round == 2 {
			srv.RecordReload(errors.New("bad file"))
		}
		time.Sleep(time.Second)
	}
	prom.waitFor(t, `sum(increase(fairgate_rejections_total{status="503"}[1m])) > 0`)

	vars := strings.NewReplacer(`$instance`, `.*`, `$__rate_interval`, `15s`, `$__range`, `5m`)
	for _, p := range dashboardPanels(t) {
		for _, expr := range p.exprs {
			q := vars.Replace(expr)
			res := prom.query(t, q)
			t.Logf("panel %q: %s -> %s", p.title, q, res.summary())
			if len(res.Result) == 0 {
				t.Errorf("panel %q: %s returned no data", p.title, q)
			}
		}
	}

	provoked := map[string]bool{"FairgateTenantThrottled": true, "FairgateOverloaded": true, "FairgateConfigReloadFailed": true}
	states := prom.alertStates(t)
	for _, r := range alertRules(t) {
		res := prom.query(t, r.Expr)
		t.Logf("alert %s (%s): %s -> %s", r.Alert, states[r.Alert], strings.Join(strings.Fields(r.Expr), " "), res.summary())
		switch {
		case provoked[r.Alert] && states[r.Alert] != "pending" && states[r.Alert] != "firing":
			t.Errorf("alert %s is %q, want pending or firing under the load that provokes it", r.Alert, states[r.Alert])
		case !provoked[r.Alert] && states[r.Alert] != "inactive":
			t.Errorf("alert %s is %q, want inactive: nothing provoked it", r.Alert, states[r.Alert])
		}
		for _, name := range metricRef.FindAllString(r.Expr, -1) {
			if res := prom.query(t, "count("+name+")"); len(res.Result) == 0 {
				t.Errorf("alert %s: Prometheus scraped no %s", r.Alert, name)
			}
		}
	}
}

// promServer is a Prometheus started for a test.
type promServer struct{ base string }

// startPrometheus starts Prometheus scraping target's /metrics every
// second, with the shipped alert rules evaluated every second, and waits
// until it is ready and has scraped the target once.
func startPrometheus(t *testing.T, bin, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	rules, err := filepath.Abs(filepath.Join("prometheus", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("global: {scrape_interval: 1s, evaluation_interval: 1s}\nrule_files: [%q]\n"+
		"scrape_configs:\n  - job_name: fairgate\n    static_configs: [{targets: [%q]}]\n", rules, target)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr, "--log.level=warn")
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	})
	p := &promServer{base: "http://" + addr}
	p.waitFor(t, `up{job="fairgate"} == 1`)
	return p
}

// freeAddr returns a loopback address no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// promResult is the data of a query's answer.
type promResult struct {
	ResultType string `json:"resultType"`
	Result     []struct {
		Metric map[string]string `json:"metric"`
		Value  [2]any            `json:"value"`
	} `json:"result"`
}

// summary lists a result's series and values, for the test's output.
func (r promResult) summary() string {
	if len(r.Result) == 0 {
		return "no data"
	}
	var b strings.Builder
	for i, s := range r.Result {
		if i == 4 {
			fmt.Fprintf(&b, " … %d series", len(r.Result))
			break
		}
		fmt.Fprintf(&b, "%v=%v ", s.Metric, s.Value[1])
	}
	return strings.TrimSpace(b.String())
}

// get fetches path from Prometheus's API and decodes its data into v; it
// returns false when Prometheus is not answering yet.
func (p *promServer) get(t *testing.T, path string, v any) bool {
	t.Helper()
	resp, err := http.Get(p.base + path)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var ans struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ans); err != nil {
		return false
	}
	if ans.Status != "success" {
		t.Fatalf("prometheus %s: %s", path, ans.Error)
	}
	if err := json.Unmarshal(ans.Data, v); err != nil {
		t.Fatalf("prometheus %s: %v", path, err)
	}
	return true
}

// query evaluates expr now.
func (p *promServer) query(t *testing.T, expr string) promResult {
	t.Helper()
	var r promResult
	if !p.get(t, "/api/v1/query?query="+url.QueryEscape(expr), &r) {
		t.Fatalf("prometheus did not answer %s", expr)
	}
	return r
}

// waitFor waits (at most 60 s) until expr returns data.
func (p *promServer) waitFor(t *testing.T, expr string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		var r promResult
		if p.get(t, "/api/v1/query?query="+url.QueryEscape(expr), &r) && len(r.Result) > 0 {
			return
		}
	}
	t.Fatalf("prometheus: %s returned no data within a minute", expr)
}

// alertStates returns each loaded alerting rule's state: inactive,
// pending or firing.
func (p *promServer) alertStates(t *testing.T) map[string]string {
	t.Helper()
	var d struct {
		Groups []struct {
			Rules []struct {
				Name  string `json:"name"`
				State string `json:"state"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if !p.get(t, "/api/v1/rules?type=alert", &d) {
		t.Fatal("prometheus did not answer /api/v1/rules")
	}
	states := map[string]string{}
	for _, g := range d.Groups {
		for _, r := range g.Rules {
			states[r.Name] = r.State
		}
	}
	return states
}
