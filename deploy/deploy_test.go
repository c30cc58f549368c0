// Tests that the deploy files parse and agree with the code: the compose
// file's services, dependencies and mounted files exist, the fairgate
// config it mounts is valid, and every metric the alerts and the dashboard
// query is one fairgate exports.
package deploy_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"

	"github.com/fairgate/fairgate/admission/gateway"
	"github.com/fairgate/fairgate/admission/redisstore"
	"github.com/fairgate/fairgate/deploy/examples"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/shed"
)

type composeFile struct {
	Services map[string]struct {
		Image string `yaml:"image"`
		Build *struct {
			Context    string `yaml:"context"`
			Dockerfile string `yaml:"dockerfile"`
		} `yaml:"build"`
		Command   []string                  `yaml:"command"`
		Volumes   []string                  `yaml:"volumes"`
		Ports     []string                  `yaml:"ports"`
		DependsOn map[string]map[string]any `yaml:"depends_on"`
	} `yaml:"services"`
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func TestComposeFile(t *testing.T) {
	const dir = "compose"
	var c composeFile
	readYAML(t, filepath.Join(dir, "compose.yaml"), &c)
	for _, want := range []string{"redis", "jaeger", "demo-upstream", "fairgate-a", "fairgate-b", "prometheus", "grafana"} {
		if _, ok := c.Services[want]; !ok {
			t.Errorf("compose.yaml: no service %q", want)
		}
	}
	if img := c.Services["jaeger"].Image; !strings.HasPrefix(img, "jaegertracing/jaeger:") {
		t.Errorf("jaeger image %q, want the published jaegertracing/jaeger", img)
	}
	for name, s := range c.Services {
		if (s.Image == "") == (s.Build == nil) {
			t.Errorf("service %s: want exactly one of image and build", name)
		}
		for dep := range s.DependsOn {
			if _, ok := c.Services[dep]; !ok {
				t.Errorf("service %s depends on %q, which is not a service", name, dep)
			}
		}
		if s.Build != nil {
			if _, err := os.Stat(filepath.Join(dir, s.Build.Context, s.Build.Dockerfile)); err != nil {
				t.Errorf("service %s: %v", name, err)
			}
		}
		for _, v := range s.Volumes {
			host := strings.Split(v, ":")[0]
			if _, err := os.Stat(filepath.Join(dir, host)); err != nil {
				t.Errorf("service %s mounts %s: %v", name, host, err)
			}
		}
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("service %s publishes %q beyond loopback", name, p)
			}
		}
	}
	// The upstream the fairgate config names is the demo upstream service,
	// listening where the config says.
	cfg, err := gateway.Load(filepath.Join(dir, "fairgate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Upstream != "http://demo-upstream:8081" || !strings.Contains(strings.Join(c.Services["demo-upstream"].Command, " "), "0.0.0.0:8081") {
		t.Errorf("upstream %q vs demo-upstream command %v", cfg.Upstream, c.Services["demo-upstream"].Command)
	}
	if cfg.Redis == nil || cfg.Redis.Addrs[0] != "redis:6379" || cfg.Tracing == nil || !strings.HasPrefix(cfg.Tracing.Endpoint, "http://jaeger:") {
		t.Errorf("fairgate.yaml: redis %+v, tracing %+v; want the compose services", cfg.Redis, cfg.Tracing)
	}
	// Grafana reads the dashboard from the compose file's Prometheus.
	var ds struct {
		Datasources []struct {
			Type, URL string
			IsDefault bool `yaml:"isDefault"`
		}
	}
	readYAML(t, filepath.Join("grafana", "provisioning", "datasources", "prometheus.yaml"), &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || !ds.Datasources[0].IsDefault ||
		ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("grafana data sources %+v, want the compose Prometheus as the default", ds.Datasources)
	}
	if !slices.Contains(c.Services["grafana"].Volumes, "../grafana/fairgate.json:/var/lib/grafana/dashboards/fairgate.json:ro") {
		t.Errorf("grafana volumes %v: the dashboard is not where its provider looks", c.Services["grafana"].Volumes)
	}
	var prom struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, filepath.Join("prometheus", "prometheus.yaml"), &prom)
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				if _, ok := c.Services[strings.Split(target, ":")[0]]; !ok {
					t.Errorf("prometheus scrapes %q, not a compose service", target)
				}
			}
		}
	}
}

// demoGateway serves the demo config (edited by edit, when not nil) with
// the adaptive limit on (its gauges too) before a do-nothing upstream, on
// loopback until the test ends: the gateway, its admin listener and the
// server.
func demoGateway(t *testing.T, edit func(*gateway.Config)) (gw, admin *httptest.Server, srv *gateway.Server) {
	t.Helper()
	cfg, err := gateway.Parse(examples.Demo)
	if err != nil {
		t.Fatal(err)
	}
	ups := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(ups.Close)
	cfg.Upstream = ups.URL
	cfg.Admission.Adaptive = &shed.AdaptiveConfig{}
	if edit != nil {
		edit(&cfg)
	}
	if srv, err = gateway.New(cfg, gateway.Options{}); err != nil {
		t.Fatal(err)
	}
	gw = httptest.NewServer(srv.Handler())
	t.Cleanup(gw.Close)
	admin = httptest.NewServer(srv.AdminHandler())
	t.Cleanup(admin.Close)
	return gw, admin, srv
}

// exported returns the names of the metric families a running gateway's
// /metrics shows (a Prometheus text scrape over HTTP, as Prometheus reads
// it) after a few admitted and rejected requests, on a real Redis (the
// store's families are exported only for a shared store).
func exported(t *testing.T) map[string]bool {
	t.Helper()
	rdb := redistest.StartServer(t)
	gw, admin, _ := demoGateway(t, func(cfg *gateway.Config) {
		cfg.Redis = &redisstore.Config{Addrs: []string{rdb.Addr()}, Timeout: time.Second}
	})
	for range 8 {
		req, _ := http.NewRequest("GET", gw.URL+"/api/v1/search", nil)
		req.Header.Set("Authorization", "Bearer demo-starter-key")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	req, _ := http.NewRequest("GET", admin.URL+"/metrics", nil)
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("/metrics Content-Type %q, want the text format", ct)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics is not Prometheus text: %v", err)
	}
	names := map[string]bool{}
	for name := range mfs {
		names[name] = true
	}
	return names
}

var metricRef = regexp.MustCompile(`fairgate_[a-z_]+`)

// checkRefs reports every fairgate_* name in text that fairgate does not
// export (histogram suffixes allowed).
func checkRefs(t *testing.T, file, text string, names map[string]bool) {
	t.Helper()
	refs := metricRef.FindAllString(text, -1)
	if len(refs) == 0 {
		t.Errorf("%s references no fairgate metric", file)
	}
	for _, ref := range refs {
		base := ref
		for _, suf := range []string{"_bucket", "_count", "_sum"} {
			base = strings.TrimSuffix(base, suf)
		}
		if !names[ref] && !names[base] {
			t.Errorf("%s: %s is not a metric fairgate exports", file, ref)
		}
	}
}

// alertRule is one rule of prometheus/alerts.yaml.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// alertRules reads prometheus/alerts.yaml's rules.
func alertRules(t *testing.T) []alertRule {
	t.Helper()
	var rules struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	readYAML(t, filepath.Join("prometheus", "alerts.yaml"), &rules)
	var all []alertRule
	for _, g := range rules.Groups {
		all = append(all, g.Rules...)
	}
	return all
}

func TestAlertRules(t *testing.T) {
	path := filepath.Join("prometheus", "alerts.yaml")
	names := exported(t)
	alerts := map[string]bool{}
	for _, r := range alertRules(t) {
		if r.Alert == "" || r.Expr == "" || r.Annotations["summary"] == "" || r.Labels["severity"] == "" {
			t.Errorf("%s: rule %+v lacks alert, expr, severity or summary", path, r)
		}
		alerts[r.Alert] = true
		checkRefs(t, path+" "+r.Alert, r.Expr, names)
	}
	for _, want := range []string{"FairgateTenantThrottled", "FairgateOverloaded", "FairgateRedisFailurePolicyEngaged", "FairgateRateLayerOverloaded"} {
		if !alerts[want] {
			t.Errorf("%s: no alert %s", path, want)
		}
	}
}

// panel is one Grafana panel of the dashboard: its title and queries.
type panel struct {
	title string
	exprs []string
}

// dashboardPanels reads grafana/fairgate.json's title, uid and panels
// (rows left out).
func dashboardPanels(t *testing.T) []panel {
	t.Helper()
	path := filepath.Join("grafana", "fairgate.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("%s: title %q uid %q", path, d.Title, d.UID)
	}
	var panels []panel
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		pn := panel{title: p.Title}
		for _, tg := range p.Targets {
			pn.exprs = append(pn.exprs, tg.Expr)
		}
		panels = append(panels, pn)
	}
	return panels
}

func TestGrafanaDashboard(t *testing.T) {
	path := filepath.Join("grafana", "fairgate.json")
	names := exported(t)
	var all strings.Builder
	for _, p := range dashboardPanels(t) {
		if len(p.exprs) == 0 {
			t.Errorf("%s: panel %q has no query", path, p.title)
		}
		for _, e := range p.exprs {
			all.WriteString(e + "\n")
		}
	}
	checkRefs(t, path, all.String(), names)
	for _, want := range []string{"layer", "tier", "fairgate_queue_wait_seconds", "fairgate_adaptive_limit", "fairgate_store_"} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("%s: no panel about %s", path, want)
		}
	}
}
