package gateway

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/bulkhead"
	"github.com/fairgate/fairgate/deploy/examples"
)

// TestGracefulShutdown: 200 requests in flight or queued when shutdown
// begins. The 100 holding seats finish with 200; the 100 queued get 503
// with Retry-After at once; no client sees a connection error; Serve
// returns nil; the log says what was drained.
func TestGracefulShutdown(t *testing.T) {
	cfg, err := Parse(examples.Demo)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var seen atomic.Int32
	up := http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		<-release
		io.WriteString(w, "done")
	})}
	uln, _ := net.Listen("tcp", "127.0.0.1:0")
	go up.Serve(uln)
	defer up.Close()
	cfg.Upstream = "http://" + uln.Addr().String()
	ent := cfg.Tenants.Tiers["enterprise"]
	ent.MaxConcurrent = 0
	cfg.Tenants.Tiers["enterprise"] = ent
	cfg.Admission.Global = nil
	cfg.Admission.Shedding.Disabled = true
	cfg.Admission.Adaptive = nil // a fixed total: exactly 100 seats
	// 100 seats for the enterprise pool (ceil(102 x 100/102)), 100 queued.
	cfg.Admission.Bulkhead = &bulkhead.Config{Total: 102, Pools: map[string]bulkhead.PoolConfig{
		"enterprise": {Share: 100, QueueLength: 100, MaxWait: time.Minute},
		"pro":        {Share: 1}, "starter": {Share: 1},
	}}
	var logs lockedBuffer
	srv, ln, aln, cancel, served := serveForShutdown(t, cfg, Shutdown{Drain: 10 * time.Second}, Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil))})

	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 0, MaxIdleConnsPerHost: 256}}
	type result struct {
		status int
		retry  string
		err    error
	}
	results := make(chan result, 200)
	for range 200 {
		go func() {
			req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/api/v1/users/me", nil)
			req.Header.Set("Authorization", "Bearer demo-enterprise-key")
			resp, err := client.Do(req)
			if err != nil {
				results <- result{err: err}
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			results <- result{status: resp.StatusCode, retry: resp.Header.Get("Retry-After")}
		}()
	}
	waitFor(t, func() bool {
		st, _ := srv.Gate().TenantState("acme")
		return seen.Load() == 100 && st.PoolStats.Queued == 100
	})
	cancel()
	waitNotReady(t, aln) // /readyz fails first, while in-flight requests drain
	counts := map[int]int{}
	for range 100 { // the queued ones are answered before the seated ones finish
		r := <-results
		if r.err != nil {
			t.Fatalf("connection error: %v", r.err)
		}
		if r.status != 503 || r.retry == "" {
			t.Fatalf("queued request at shutdown: %d Retry-After %q", r.status, r.retry)
		}
		counts[r.status]++
	}
	close(release)
	for range 100 {
		r := <-results
		if r.err != nil {
			t.Fatalf("connection error: %v", r.err)
		}
		counts[r.status]++
	}
	if counts[200] != 100 || counts[503] != 100 {
		t.Fatalf("statuses %v, want 100 x 200 and 100 x 503", counts)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	want := map[string]map[string]float64{
		"shutting down: draining": {"in_flight": 100, "queued_rejected": 100},
		"shut down":               {"finished": 100, "cut_off": 0},
	}
	for _, rec := range logs.records(t) {
		for k, v := range want[rec["msg"].(string)] {
			if rec[k] != v {
				t.Errorf("log %q: %s = %v, want %v", rec["msg"], k, rec[k], v)
			}
		}
		delete(want, rec["msg"].(string))
	}
	for msg := range want {
		t.Errorf("no log line %q", msg)
	}
}

// TestShutdownDelayKeepsServing (issue 12): SIGTERM closed the listener in
// the same instant /readyz turned not-ready, so a load balancer still
// routing to the instance found a closed port. For Shutdown.Delay the
// instance is not ready but still serves new connections; then it drains.
func TestShutdownDelayKeepsServing(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	cfg, err := Parse(examples.Demo)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Upstream = up.URL
	_, ln, aln, cancel, served := serveForShutdown(t, cfg, Shutdown{Delay: 2 * time.Second, Drain: time.Second}, Options{})
	cancel()
	waitNotReady(t, aln)
	// Not ready, and still serving a new connection.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/api/v1/users/me", nil)
	req.Header.Set("Authorization", "Bearer demo-enterprise-key")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("a new connection during the shutdown delay: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("during the shutdown delay: %d, want 200", resp.StatusCode)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Fatal("still listening after the delay and the drain")
	}
}

// serveForShutdown builds a server from cfg and serves it on fresh loopback
// listeners until cancel is called.
func serveForShutdown(t *testing.T, cfg Config, sh Shutdown, o Options) (srv *Server, ln, aln net.Listener, cancel func(), served chan error) {
	t.Helper()
	srv, err := New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	ln, _ = net.Listen("tcp", "127.0.0.1:0")
	aln, _ = net.Listen("tcp", "127.0.0.1:0")
	ctx, cancel := context.WithCancel(context.Background())
	served = make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln, aln, sh) }()
	return srv, ln, aln, cancel, served
}

// waitNotReady waits until the admin listener's /readyz answers 503.
func waitNotReady(t *testing.T, aln net.Listener) {
	t.Helper()
	waitFor(t, func() bool {
		resp, err := http.Get("http://" + aln.Addr().String() + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 503
	})
}
