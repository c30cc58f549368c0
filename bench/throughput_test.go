package bench

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/admission/gateway"
)

// TestThroughputConfig: the scenario's gateway admits the rotating keys and
// answers the flood key 429 after its one request.
func TestThroughputConfig(t *testing.T) {
	do, _ := benchGateway(t, throughputConfig)
	for i := range throughputTenants {
		if got := do(tenantKey(i)); got != 200 {
			t.Fatalf("tenant %d: %d", i, got)
		}
	}
	do(floodKey)
	if got := do(floodKey); got != 429 {
		t.Fatalf("flood key: %d, want 429", got)
	}
}

// benchGateway runs the gateway that config builds in front of an
// upstream answering 200, and returns a function that sends it GET
// users/me with a key and returns the status, and the config.
func benchGateway(t *testing.T, config func(upstream string) (gateway.Config, error)) (do func(key string) int, cfg gateway.Config) {
	t.Helper()
	up := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(up.Close)
	cfg, err := config(up.URL)
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(cfg, gateway.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	return func(key string) int {
		r := httptest.NewRequest("GET", "/api/v1/users/me", nil)
		r.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		gw.Handler().ServeHTTP(w, r)
		return w.Code
	}, cfg
}

func TestCPUOfSelf(t *testing.T) {
	for cpuOf(os.Getpid()) == 0 {
		for range 1_000_000 {
			_ = strings.Repeat("x", 8)
		}
	}
	if got := cpuOf(-1); got != 0 {
		t.Fatalf("cpuOf(-1) = %v", got)
	}
}

func TestWriteThroughputSkips(t *testing.T) {
	var b strings.Builder
	rows := []ThroughputRow{{Round: 1, Conns: 8, Mode: "reverseproxy", OK: 100, ServerCPU: 50},
		{Round: 1, Conns: 8, Mode: "fairgate", OK: 120, ServerCPU: 40}, {Round: 1, Conns: 8, Mode: "nginx", Skipped: "nginx is not installed"}}
	if err := WriteThroughput(&b, ThroughputResult{Rows: rows}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"skipped: nginx is not installed", "| 1 | 8 | fairgate | 1.20× | — | — | — | -10.0 |", "-10.0"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in\n%s", want, b.String())
		}
	}
}

// TestParseWrk reads a report of wrk 4 with --latency, and refuses one
// without a request count.
func TestParseWrk(t *testing.T) {
	const out = `Running 5s test @ http://127.0.0.1:18080/api/v1/users/me
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   542.21us  311.29us   4.50ms   66.65%
    Req/Sec   119.86k     5.12k  130.00k    72.00%
  Latency Distribution
     50%  500.00us
     75%  650.00us
     90%  800.00us
     99%    1.50ms
  596375 requests in 5.00s, 319.09MB read
  Non-2xx or 3xx responses: 596370
  Socket errors: connect 0, read 2, write 0, timeout 1
Requests/sec: 119256.94
`
	r, err := parseWrk(out)
	if err != nil {
		t.Fatal(err)
	}
	want := wrkResult{requests: 596375, non2xx: 596370, socketErrors: 3, wall: 5 * time.Second, p50: 0.5, p99: 1.5}
	if r != want {
		t.Fatalf("got %+v, want %+v", r, want)
	}
	if _, err := parseWrk("unable to connect to 127.0.0.1:1 Connection refused\n"); err == nil {
		t.Fatal("a report without a request count was read")
	}
	if !strings.Contains(wrkScript([]string{"k1", "k2"}), `{["Authorization"] = "Bearer k2"}`) {
		t.Fatalf("script:\n%s", wrkScript([]string{"k1", "k2"}))
	}
}

// TestParseH2load reads a report of h2load (nghttp2 1.52): 4xx answers
// are "failed" to it but not errors here; a report without a result is
// refused.
func TestParseH2load(t *testing.T) {
	out := `starting benchmark...
finished in 5.00s, 21195.40 req/s, 5.13MB/s
requests: 105977 total, 105977 started, 105977 done, 0 succeeded, 105977 failed, 3 errored, 0 timeout
status codes: 0 2xx, 0 3xx, 105974 4xx, 0 5xx
traffic: 25.65MB (26895113) total, 2.21MB (2319183) headers (space savings 85.81%), 22.08MB (23151920) data
`
	r, err := parseH2load(out)
	if err != nil {
		t.Fatal(err)
	}
	if r.wall != 5*time.Second || r.status4xx != 105974 || r.status2xx != 0 || r.failed != 3 {
		t.Fatalf("parsed %+v", r)
	}
	if _, err := parseH2load("connect: Connection refused\n"); err == nil {
		t.Fatal("a report without a result parsed")
	}
}
