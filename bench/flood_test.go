package bench

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestPacedSchedule(t *testing.T) {
	p := paced{rate: 8000}
	for _, tc := range []struct {
		i    int
		want time.Duration
	}{{0, 0}, {1, 125 * time.Microsecond}, {8000, time.Second}, {80000, 10 * time.Second}} {
		if got := p.at(tc.i); got != tc.want {
			t.Errorf("at(%d) = %v, want %v", tc.i, got, tc.want)
		}
	}
	// On schedule: 8000 requests, the last started at 7999/8000 s.
	r := pacedResult{sent: 8000, lastStart: p.at(7999)}
	if got := p.sendRate(r); math.Abs(got-8000) > 1e-6 {
		t.Errorf("sendRate on schedule = %v, want 8000", got)
	}
	// Behind: the same requests over two seconds.
	r.lastStart = 2*time.Second - p.at(1)
	if got := p.sendRate(r); math.Abs(got-4000) > 1e-6 {
		t.Errorf("sendRate over 2 s = %v, want 4000", got)
	}
	if got := p.sendRate(pacedResult{}); got != 0 {
		t.Errorf("sendRate of nothing = %v", got)
	}
}

func TestPacedMergeAndCounts(t *testing.T) {
	ms := time.Millisecond
	r := mergePaced([]pacedResult{
		{byStatus: map[int]int{200: 2, 429: 1}, sent: 3, lastStart: 5 * ms, lat: []time.Duration{3 * ms, 1 * ms}, lag: []time.Duration{0, 2 * ms, ms}},
		{byStatus: map[int]int{429: 4, 503: 1, 0: 1}, sent: 6, lastStart: 7 * ms, lat: []time.Duration{2 * ms}, lag: []time.Duration{0, 0, 0, 0, 0, 3 * ms}},
	})
	if r.sent != 9 || r.lastStart != 7*ms || r.byStatus[429] != 5 {
		t.Errorf("merged sent %d, lastStart %v, 429s %d; want 9, 7ms, 5", r.sent, r.lastStart, r.byStatus[429])
	}
	if got, want := fmt.Sprint(r.lat), "[1ms 2ms 3ms]"; got != want {
		t.Errorf("lat %s, want %s", got, want)
	}
	// 2 ms and 3 ms are late; exactly 1 ms is not.
	if got, want := r.late(), 2.0/9; got != want {
		t.Errorf("late %v, want %v", got, want)
	}
	if got, want := formatCounts(r.others(200, 429)), "503×1, error×1"; got != want {
		t.Errorf("others %q, want %q", got, want)
	}
	if got := formatCounts(r.others(200, 429, 503, 0)); got != "0" {
		t.Errorf("no others: %q", got)
	}
}

// TestPacedRun: every scheduled request is sent once, with the key, and
// answered.
func TestPacedRun(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	}))
	defer srv.Close()
	p := paced{url: srv.URL, key: "k", rate: 1e6, n: 50, conns: 4}
	r := p.run(context.Background(), time.Now())
	if r.sent != 50 || r.byStatus[200] != 50 || len(r.lat) != 50 || len(r.lag) != 50 {
		t.Fatalf("sent %d, 200s %d, latencies %d, lags %d; want 50 each", r.sent, r.byStatus[200], len(r.lat), len(r.lag))
	}
}

// TestDemoConfigFlood: the flood round's gateway is the demo config: the
// innocent key is admitted, the flood key is 429 once its burst is spent.
func TestDemoConfigFlood(t *testing.T) {
	do, cfg := benchGateway(t, demoConfig)
	if got := do(demoInnocentKey); got != 200 {
		t.Fatalf("innocent: %d, want 200", got)
	}
	burst := int(cfg.Tenants.Tiers["starter"].Burst)
	for range burst + 1 {
		do(demoFloodKey)
	}
	if got := do(demoFloodKey); got != 429 {
		t.Fatalf("flood key after its burst: %d, want 429", got)
	}
}

// TestNginxDemoConfQuotas: nginx's zones in the flood round are the demo
// config's tiers (rate and burst), so the comparison limits the same.
func TestNginxDemoConfQuotas(t *testing.T) {
	cfg, err := demoConfig("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	for name, tier := range cfg.Tenants.Tiers {
		for _, want := range []string{
			fmt.Sprintf("zone=%s:1m rate=%gr/s;", name, tier.Rate),
			fmt.Sprintf("zone=%s burst=%g nodelay;", name, tier.Burst),
		} {
			if !strings.Contains(nginxDemoConf, want) {
				t.Errorf("nginx demo conf lacks %q", want)
			}
		}
	}
}

func TestWriteFlood(t *testing.T) {
	var b strings.Builder
	rows := []FloodRow{{Round: 1, Mode: "fairgate-flood", Sent: 7999, Flood429: 7990, QuietP99: 10, LoudP99: 15, FloodOther: map[string]int{"503": 3}},
		{Round: 1, Mode: "nginx-flood", Skipped: "nginx is not installed"}}
	if err := WriteFlood(&b, rows); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| 1 | fairgate-flood | 7999 ", "| 1.50× |", "| 503×3 |", "skipped: nginx is not installed"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in\n%s", want, b.String())
		}
	}
}
