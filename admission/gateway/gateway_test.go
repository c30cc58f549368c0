package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairgate/fairgate/deploy/examples"
	"github.com/fairgate/fairgate/internal/fakeclock"
	"github.com/fairgate/fairgate/tenant"
)

// recorder is the upstream of the end-to-end tests: it records what it saw.
type recorder struct {
	mu      sync.Mutex
	reqs    []*http.Request
	handler func(w http.ResponseWriter, r *http.Request)
}

func (u *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	u.reqs = append(u.reqs, r.Clone(context.Background()))
	h := u.handler
	u.mu.Unlock()
	if h != nil {
		h(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	io.WriteString(w, "hello "+r.Header.Get("X-Tenant-Id"))
}

func (u *recorder) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.reqs)
}

func (u *recorder) last() *http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.reqs[len(u.reqs)-1]
}

// startGateway runs the demo config in front of a recording upstream on
// loopback and returns the gateway's base URL.
func startGateway(t *testing.T, mutate func(*Config), o Options) (string, *recorder, *Server) {
	t.Helper()
	up := &recorder{}
	ups := httptest.NewServer(up)
	t.Cleanup(ups.Close)
	cfg, err := Parse(examples.Demo)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Upstream = ups.URL
	// FAIRGATE_TEST_ENGINE runs the tests on another stack (server.engine).
	cfg.Server.Engine = Engine(os.Getenv("FAIRGATE_TEST_ENGINE"))
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	aln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln, aln, Shutdown{Drain: 5 * time.Second}) }()
	t.Cleanup(func() {
		// Idle keep-alive connections of the shared client would make
		// Shutdown wait for them.
		http.DefaultClient.CloseIdleConnections()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String(), up, srv
}

type response struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, method, url, key string, hdr map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, string(b)}
}

func decodeRejection(t *testing.T, r response) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(r.body), &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", r.body, err)
	}
	for _, k := range []string{"error", "message", "layer", "retry_after", "request_id"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("body %s lacks %q", r.body, k)
		}
	}
	if m["request_id"] != r.header.Get("X-Request-Id") {
		t.Fatalf("request_id %v != X-Request-Id %q", m["request_id"], r.header.Get("X-Request-Id"))
	}
	return m
}

func TestEndToEndClientContract(t *testing.T) {
	clk := fakeclock.New()
	base, up, _ := startGateway(t, nil, Options{Now: clk.Now})

	// No key: 401 with the JSON body; the upstream sees nothing.
	r := do(t, "GET", base+"/api/v1/users/me", "", nil)
	if r.status != 401 {
		t.Fatalf("no key: %d", r.status)
	}
	if m := decodeRejection(t, r); m["error"] != "unauthorized" || m["layer"] != "identify" {
		t.Fatalf("no key body: %v", m)
	}
	r = do(t, "GET", base+"/api/v1/users/me", "not-a-key", nil)
	if r.status != 401 {
		t.Fatalf("unknown key: %d", r.status)
	}

	// The starter's burst of 25: five searches, then 429 with Retry-After
	// computed from the bucket (5 tokens at 5/s = 1 s), while the
	// enterprise tenant is served at the same instant. A spoofed
	// X-Tenant-Id changes nothing.
	spoof := map[string]string{"X-Tenant-Id": "acme", "X-Tenant-Tier": "enterprise", "RateLimit-Remaining": "500"}
	for i := range 5 {
		r = do(t, "GET", base+"/api/v1/search", "demo-starter-key", spoof)
		if r.status != 200 {
			t.Fatalf("search %d: %d %s", i, r.status, r.body)
		}
		if got := up.last().Header.Get("X-Tenant-Id"); got != "initech" {
			t.Fatalf("upstream saw X-Tenant-Id %q, want initech", got)
		}
	}
	seen := up.count()
	r = do(t, "GET", base+"/api/v1/search", "demo-starter-key", spoof)
	if r.status != 429 || r.header.Get("Retry-After") != "1" {
		t.Fatalf("6th search: %d Retry-After %q", r.status, r.header.Get("Retry-After"))
	}
	m := decodeRejection(t, r)
	if m["error"] != "rate_limited" || m["layer"] != "rate" || m["retry_after"] != 1.0 {
		t.Fatalf("429 body: %v", m)
	}
	if up.count() != seen {
		t.Fatal("the upstream saw a rejected request")
	}
	r = do(t, "GET", base+"/api/v1/users/me", "demo-enterprise-key", nil)
	if r.status != 200 || r.body != "hello acme" {
		t.Fatalf("enterprise during the starter's 429s: %d %q", r.status, r.body)
	}

	// Headers on every response, admitted or not.
	for _, h := range []string{"X-Request-Id", "RateLimit", "RateLimit-Policy", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} {
		if r.header.Get(h) == "" {
			t.Errorf("admitted response lacks %s", h)
		}
	}

	// Refill, on the fake clock: a second gives back 5 tokens.
	clk.Advance(time.Second)
	if r = do(t, "GET", base+"/api/v1/search", "demo-starter-key", nil); r.status != 200 {
		t.Fatalf("after one second: %d", r.status)
	}
	if r = do(t, "GET", base+"/api/v1/users/me", "demo-starter-key", nil); r.status != 429 {
		t.Fatalf("bucket should be empty again: %d", r.status)
	}
}

func TestEndToEndHygiene(t *testing.T) {
	base, up, _ := startGateway(t, func(c *Config) { c.Server.MaxBodyBytes = 1024 }, Options{})

	// The upstream gets X-Forwarded-For from the proxy, not the client's,
	// and the tenant headers even when the client names them in Connection.
	r := do(t, "GET", base+"/api/v1/users/me", "demo-pro-key", map[string]string{
		"X-Forwarded-For": "6.6.6.6", "Connection": "X-Tenant-Id, X-Tenant-Tier", "Keep-Alive": "timeout=5", "X-Fairgate-Priority": "499"})
	if r.status != 200 {
		t.Fatalf("status %d", r.status)
	}
	got := up.last()
	if xff := got.Header.Get("X-Forwarded-For"); xff != "127.0.0.1" {
		t.Errorf("upstream X-Forwarded-For = %q, want 127.0.0.1", xff)
	}
	if got.Header.Get("X-Tenant-Id") != "globex" || got.Header.Get("X-Tenant-Tier") != "pro" {
		t.Errorf("upstream tenant headers %q %q", got.Header.Get("X-Tenant-Id"), got.Header.Get("X-Tenant-Tier"))
	}
	if got.Header.Get("Keep-Alive") != "" || got.Header.Get("X-Fairgate-Priority") != "" {
		t.Errorf("hop-by-hop or priority header forwarded: %v", got.Header)
	}
	if got.Header.Get("X-Request-Id") != r.header.Get("X-Request-Id") {
		t.Errorf("upstream X-Request-Id %q, client %q", got.Header.Get("X-Request-Id"), r.header.Get("X-Request-Id"))
	}

	// A body over the limit: 413, the upstream sees nothing.
	seen := up.count()
	req, _ := http.NewRequest("POST", base+"/api/v1/reports/export", strings.NewReader(strings.Repeat("x", 4096)))
	req.Header.Set("Authorization", "Bearer demo-enterprise-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 || up.count() != seen {
		t.Fatalf("oversized body: %d, upstream saw %d new", resp.StatusCode, up.count()-seen)
	}

	// Oversized headers: 431 from the server itself.
	r = do(t, "GET", base+"/api/v1/users/me", "demo-pro-key", map[string]string{"X-Big": strings.Repeat("a", 40<<10)})
	if r.status != 431 {
		t.Fatalf("oversized headers: %d", r.status)
	}
}

func TestEndToEndUpstreamFailures(t *testing.T) {
	base, up, _ := startGateway(t, func(c *Config) { c.Server.UpstreamTimeout = 200 * time.Millisecond }, Options{})
	block := make(chan struct{})
	defer close(block)
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}
	r := do(t, "GET", base+"/api/v1/users/me", "demo-pro-key", nil)
	if r.status != 504 {
		t.Fatalf("slow upstream: %d, want 504", r.status)
	}
	if m := decodeRejection(t, r); m["error"] != "upstream_timeout" {
		t.Fatalf("504 body %v", m)
	}

	// An upstream that refuses connections: 502.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + ln.Addr().String()
	ln.Close()
	base2, _, _ := startGateway(t, func(c *Config) { c.Upstream = dead }, Options{})
	r = do(t, "GET", base2+"/api/v1/users/me", "demo-pro-key", nil)
	if r.status != 502 {
		t.Fatalf("refused upstream: %d, want 502", r.status)
	}
	if m := decodeRejection(t, r); m["error"] != "bad_gateway" {
		t.Fatalf("502 body %v", m)
	}
}

func TestAdminEndpoints(t *testing.T) {
	_, _, srv := startGateway(t, nil, Options{})
	admin := httptest.NewServer(srv.AdminHandler())
	defer admin.Close()
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/admin/tenants/acme": 200, "/admin/tenants/nobody": 404} {
		r := do(t, "GET", admin.URL+path, "", nil)
		if r.status != want {
			t.Errorf("GET %s = %d, want %d", path, r.status, want)
		}
	}
}

func TestConfigErrorsNameFieldAndFile(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, edit, want string
		from, to         string // for the other cases: replace from with to
	}{
		{name: "typo", edit: "  pro:\n    burts: 100\n", want: "tiers.pro.burts: unknown field (line "},
		{name: "rate", edit: "  pro:\n    burst: 100\n    rate: 0\n", want: "tiers.pro.rate: must be > 0"},
		{name: "cost above burst", want: "routes[0].cost: 30 is above tiers.starter.burst (25)"},
		{name: "upstream", want: "upstream: required"},
		// Issue 12: each of these was accepted before.
		{name: "cost 0", from: "cost: 1\n", to: "cost: 0\n", want: "routes[0].cost: must be >= 1"},
		{name: "trailing slash", from: "path: /api/v1/users/me\n", to: "path: /api/v1/users/me/\n", want: "routes[0].path: \"/api/v1/users/me/\" ends in '/'"},
		{name: "empty segment", from: "path: /api/v1/users/me\n", to: "path: /api//users/me\n", want: "routes[0].path: \"/api//users/me\" has an empty segment"},
		{name: "dot segment", from: "path: /api/v1/users/me\n", to: "path: /api/v1/../users/me\n", want: `routes[0].path: "/api/v1/../users/me" has a ".." segment`},
		{name: "unmatched cost 0", from: "routes:\n", to: "unmatched: {cost: 0}\nroutes:\n", want: "unmatched.cost: must be >= 1"},
		{name: "unmatched cost above burst", from: "routes:\n", to: "unmatched: {cost: 30}\nroutes:\n", want: "unmatched.cost: 30 is above tiers.starter.burst (25)"},
		{name: "unknown field path", from: "    cost: 5\n", to: "    cost: 5\n    max_concurent: 3\n", want: "routes[1].max_concurent: unknown field (line "},
		{name: "duration without unit", from: "upstream_timeout: 10s\n", to: "upstream_timeout: 10\n", want: "server.upstream_timeout: cannot unmarshal !!int `10` into time.Duration (a duration needs a unit"},
		{name: "criticality typo", from: "criticality: sheddable\n", to: "criticality: shedable\n", want: `routes[2].criticality: unknown criticality "shedable"`},
		{name: "newline in a name", from: "  pro:\n", to: "  \"pr\\no\":\n", want: `tiers."pr\no": tier name must be`},
		{name: "encoded_slashes", from: "routes:\n", to: "encoded_slashes: decode\nroutes:\n", want: `encoded_slashes: "decode" is not refuse or allow`},
		{name: "limit per", from: proTier, to: proTier + "    limits: [{name: daily, burst: 1000, per: 0.5ms}]\n", want: "tiers.pro.limits[0].per: must be at least 1ms"},
		{name: "limit field", from: proTier, to: proTier + "    limits: [{name: daily, burst: 1000, period: 24h}]\n", want: "tiers.pro.limits[0].period: unknown field (line "},
		{name: "engine", from: "server:\n", to: "server:\n  engine: netty\n", want: `server.engine: "netty" is not net/http or fasthttp`},
		{name: "upstream_protocol", from: "server:\n", to: "upstream_protocol: h3\nserver:\n", want: `upstream_protocol: "h3" is not http1 or h2c`},
		{name: "trusted_proxies", from: "server:\n", to: "server:\n  trusted_proxies: [10.0.0.0/8, nonsense]\n", want: `server.trusted_proxies[1]: "nonsense" is not a CIDR`},
		{name: "tls key", from: "server:\n", to: "server:\n  tls: {cert_file: c.pem}\n", want: "server.tls.key_file: required"},
		{name: "limit cost", from: proTier, to: proTier + "    limits: [{name: minute, burst: 3, per: 1m}]\n", want: "routes[1].cost: 5 is above tenant globex's limits.minute.burst (3)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := string(examples.Demo)
			switch tt.name {
			case "typo", "rate":
				doc = strings.Replace(doc, "  pro:\n    burst: 100\n    rate: 20\n", tt.edit, 1)
			case "cost above burst":
				doc = strings.Replace(doc, "cost: 1\n", "cost: 30\n", 1)
			case "upstream":
				doc = strings.Replace(doc, "upstream: http://127.0.0.1:8081\n", "", 1)
			default:
				if !strings.Contains(doc, tt.from) {
					t.Fatalf("the demo config has no %q", tt.from)
				}
				doc = strings.Replace(doc, tt.from, tt.to, 1)
			}
			path := filepath.Join(dir, tt.name+".yaml")
			os.WriteFile(path, []byte(doc), 0o600)
			_, err := Load(path)
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), path+": ") {
				t.Fatalf("Load = %v, want %q prefixed with the path", err, tt.want)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, path+": ") {
					t.Errorf("error line %q does not name the file (a name broke the line?)", line)
				}
			}
		})
	}
}

// proTier is the pro tier's quota in the demo config.
const proTier = "  pro:\n    burst: 100\n    rate: 20\n"

// TestLimitsAndShadowParse: limits (by rate or per) and shadow load from
// the file onto tiers, tenants and routes.
func TestLimitsAndShadowParse(t *testing.T) {
	doc := strings.Replace(string(examples.Demo), proTier, proTier+
		"    shadow: true\n    limits:\n      - {name: per-second, burst: 50, rate: 10}\n      - {name: daily, burst: 100000, per: 24h}\n", 1)
	doc = strings.Replace(doc, "    cost: 5\n", "    cost: 5\n    shadow: true\n", 1)
	cfg, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := tenant.NewRegistry(cfg.Tenants)
	if err != nil {
		t.Fatal(err)
	}
	globex, _ := reg.ByID("globex")
	want := []tenant.Limit{{Name: "per-second", Quota: tenant.Quota{Rate: 10, Burst: 50}}, {Name: "daily", Quota: tenant.Quota{Rate: 100000.0 / 86400, Burst: 100000}}}
	if !slices.Equal(globex.Limits, want) || !globex.Shadow {
		t.Fatalf("globex: limits %+v, shadow %v; want %+v in shadow", globex.Limits, globex.Shadow, want)
	}
	if !cfg.Admission.Routes[1].Shadow || cfg.Admission.Routes[0].Shadow {
		t.Fatalf("routes: %+v, want the second in shadow", cfg.Admission.Routes)
	}
}

func FuzzParse(f *testing.F) {
	f.Add(examples.Demo)
	f.Add([]byte("upstream: http://x\ntiers: {a: {rate: 1, burst: 1}}\n"))
	f.Add([]byte("routes: [{method: GET, path: /{x}/*, cost: 1e308}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			return
		}
		// Whatever parses must build a server.
		if _, err := New(c, Options{}); err != nil {
			t.Fatalf("Parse accepted a config New rejects: %v", err)
		}
	})
}
