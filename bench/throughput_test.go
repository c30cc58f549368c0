package bench

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

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
	for _, want := range []string{"skipped: nginx is not installed", "| 1 | 8 | 1.20× | — | — | -10.0 |", "-10.0"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in\n%s", want, b.String())
		}
	}
}
