package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/faultproxy"
	"github.com/fairgate/fairgate/shed"
)

// startFaulty runs the demo config (bulkhead pools, concurrency caps,
// shedding) with a fault proxy between the gateway and its recording
// upstream.
func startFaulty(t *testing.T, mutate func(*Config), o Options) (string, *recorder, *Server, *faultproxy.Proxy) {
	t.Helper()
	var fp *faultproxy.Proxy
	base, up, srv := startGateway(t, func(c *Config) {
		u, err := url.Parse(c.Upstream)
		if err != nil {
			t.Fatal(err)
		}
		fp, err = faultproxy.New(u.Host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fp.Close() }) // runs after the gateway has shut down
		c.Upstream = "http://" + fp.Addr()
		if mutate != nil {
			mutate(c)
		}
	}, o)
	return base, up, srv, fp
}

// held reports globex's slot under its concurrency cap and seats in its
// bulkhead pool.
func held(t *testing.T, srv *Server, id string) (slots, seats int) {
	t.Helper()
	st, ok := srv.Gate().TenantState(id)
	if !ok || st.PoolStats == nil {
		t.Fatalf("TenantState(%q) = %+v, %v; want a tenant with a pool", id, st, ok)
	}
	return st.InFlight, st.PoolStats.InFlight
}

// waitReleased waits until the tenant holds no concurrency slot and its
// pool no seat. The middleware releases after the handler returns, which
// may be just after the client has read the response.
func waitReleased(t *testing.T, srv *Server, id string) {
	t.Helper()
	waitFor(t, func() bool {
		slots, seats := held(t, srv, id)
		return slots == 0 && seats == 0
	})
}

// TestUpstreamFaults: every upstream fault becomes the client contract's
// 502 or 504 with the JSON body, and the request's concurrency slot and
// bulkhead seat come back. For the slow faults the test first sees the slot
// and seat held, so "released" is not vacuous.
func TestUpstreamFaults(t *testing.T) {
	const timeout = 300 * time.Millisecond
	tests := []struct {
		name      string
		fault     faultproxy.Fault
		closed    bool // the proxy is closed: nothing listens
		status    int
		errorWord string
		slow      bool
	}{
		{name: "refused", closed: true, status: 502, errorWord: "bad_gateway"},
		{name: "closed at accept", fault: faultproxy.Fault{Mode: faultproxy.Drop}, status: 502, errorWord: "bad_gateway"},
		{name: "reset before headers", fault: faultproxy.Fault{Mode: faultproxy.Reset, ResetAfter: 10}, status: 502, errorWord: "bad_gateway"},
		{name: "too slow", fault: faultproxy.Fault{Mode: faultproxy.Latency, Latency: 3 * time.Second}, status: 504, errorWord: "upstream_timeout", slow: true},
		{name: "black hole", fault: faultproxy.Fault{Mode: faultproxy.BlackHole}, status: 504, errorWord: "upstream_timeout", slow: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base, up, srv, fp := startFaulty(t, func(c *Config) { c.Server.UpstreamTimeout = timeout }, Options{})
			fp.Set(tt.fault)
			if tt.closed {
				fp.Close()
			}
			start := time.Now()
			res := make(chan response, 1)
			go func() { res <- do(t, "GET", base+"/api/v1/users/me", "demo-pro-key", nil) }()
			if tt.slow {
				waitFor(t, func() bool { s, p := held(t, srv, "globex"); return s == 1 && p == 1 })
			}
			r := <-res
			took := time.Since(start)
			if r.status != tt.status {
				t.Fatalf("status %d %q, want %d", r.status, r.body, tt.status)
			}
			if m := decodeRejection(t, r); m["error"] != tt.errorWord || m["layer"] != "proxy" {
				t.Fatalf("body %v, want error %q from layer proxy", m, tt.errorWord)
			}
			if tt.slow && took > timeout+2*time.Second {
				t.Fatalf("%d after %v, want it within the %v upstream timeout (+2s for a loaded machine)", r.status, took, timeout)
			}
			if tt.name == "black hole" && up.count() != 0 {
				t.Fatalf("the upstream saw %d requests through a black hole", up.count())
			}
			waitReleased(t, srv, "globex")
			t.Logf("%s: %d after %v", tt.name, r.status, took.Round(time.Millisecond))
		})
	}
}

// TestUpstreamResetMidResponse: the upstream's status line and headers get
// through, then the connection is reset in the body. The gateway has
// already sent 200 and the headers, so it cannot turn the failure into a
// 502: httputil.ReverseProxy aborts the client connection
// (panic(http.ErrAbortHandler), which net/http recovers silently), and a
// client reading the body sees it end early (io.ErrUnexpectedEOF against
// the Content-Length). This is what nginx does as well (the upstream's
// status is already out; the client connection is closed). The slot and
// seat still come back.
func TestUpstreamResetMidResponse(t *testing.T) {
	base, up, srv, fp := startFaulty(t, nil, Options{})
	body := strings.Repeat("x", 256<<10)
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "262144")
		io.WriteString(w, body)
	}
	fp.Set(faultproxy.Fault{Mode: faultproxy.Reset, ResetAfter: 8 << 10}) // headers and some of the body
	req, _ := http.NewRequest("GET", base+"/api/v1/users/me", nil)
	req.Header.Set("Authorization", "Bearer demo-pro-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("no response at all: %v (the reset came before the headers: raise ResetAfter)", err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength != int64(len(body)) {
		t.Fatalf("status %d Content-Length %d, want the upstream's 200 and %d", resp.StatusCode, resp.ContentLength, len(body))
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(got) >= len(body) {
		t.Fatalf("read %d of %d bytes, err %v; want a truncated body and io.ErrUnexpectedEOF", len(got), len(body), err)
	}
	t.Logf("client read %d of %d bytes, then %v", len(got), len(body), err)
	waitReleased(t, srv, "globex")

	// The gateway still serves once the upstream behaves.
	fp.Set(faultproxy.Fault{})
	up.handler = nil
	if r := do(t, "GET", base+"/api/v1/users/me", "demo-pro-key", nil); r.status != 200 {
		t.Fatalf("after the reset: %d", r.status)
	}
	waitReleased(t, srv, "globex")
}

// TestClientDisconnectCancelsUpstream: a client that goes away while the
// upstream works cancels the upstream call (the upstream handler's context
// is done), the gateway logs it as 499 client-closed and not as a 502 or
// 504, and the slot and seat come back.
func TestClientDisconnectCancelsUpstream(t *testing.T) {
	var logs lockedBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	base, up, srv := startGateway(t, nil, Options{Logger: log})
	entered := make(chan struct{})
	cancelled := make(chan error, 1)
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		select {
		case <-r.Context().Done():
			cancelled <- r.Context().Err()
		case <-time.After(5 * time.Second):
			cancelled <- errors.New("the upstream call was not cancelled within 5s")
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/v1/users/me", nil)
	req.Header.Set("Authorization", "Bearer demo-pro-key")
	errc := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-entered
	if s, p := held(t, srv, "globex"); s != 1 || p != 1 {
		t.Fatalf("while the upstream works: slots %d seats %d, want 1 and 1", s, p)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v, want context.Canceled", err)
	}
	if err := <-cancelled; err != context.Canceled {
		t.Fatalf("upstream context: %v", err)
	}
	waitReleased(t, srv, "globex")
	// The seat comes back before the 499 line is written: wait for it.
	waitFor(t, func() bool { return strings.Contains(logs.String(), `"status":499`) })

	var saw499 bool
	for _, rec := range logs.records(t) {
		switch {
		case rec["status"] == 499.0:
			saw499 = true
		case rec["level"] == "WARN" && strings.Contains(rec["msg"].(string), "upstream"):
			t.Errorf("client disconnect logged as an upstream failure: %v", rec)
		}
	}
	if !saw499 {
		t.Fatalf("no log record with status 499 in:\n%s", logs.String())
	}
}

// TestSlowUpstreamCutsAdaptiveLimit: upstream timeouts teach the adaptive
// limit that the upstream is unhealthy (each call is slower than
// max_latency), so the limit falls and the pools' seats with it. Negative
// control: the same number of fast calls leaves the seats as they were.
func TestSlowUpstreamCutsAdaptiveLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		slow bool
	}{{"slow", true}, {"negative-control", false}} {
		t.Run(tc.name, func(t *testing.T) {
			base, _, srv, fp := startFaulty(t, func(c *Config) {
				c.Server.UpstreamTimeout = 250 * time.Millisecond
				c.Admission.Adaptive = &shed.AdaptiveConfig{Min: 3, Max: 16, Initial: 16, MaxLatency: 100 * time.Millisecond}
			}, Options{})
			if tc.slow {
				fp.Set(faultproxy.Fault{Mode: faultproxy.Latency, Latency: 3 * time.Second})
			}
			seats := func() int {
				st, _ := srv.Gate().TenantState("acme")
				return st.PoolStats.Seats
			}
			before := seats()
			want := 200
			if tc.slow {
				want = 504
			}
			for range 4 {
				if r := do(t, "GET", base+"/api/v1/users/me", "demo-enterprise-key", nil); r.status != want {
					t.Fatalf("status %d, want %d", r.status, want)
				}
			}
			waitReleased(t, srv, "acme")
			after := seats()
			t.Logf("%s: enterprise pool seats %d -> %d", tc.name, before, after)
			if tc.slow && after >= before {
				t.Fatalf("seats %d -> %d after four upstream timeouts, want fewer", before, after)
			}
			if !tc.slow && after < before {
				t.Fatalf("seats %d -> %d after four fast calls", before, after)
			}
		})
	}
}

// lockedBuffer is a bytes.Buffer safe for the server's concurrent logging.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// records decodes the JSON log lines written so far.
func (b *lockedBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// TestUpstreamDownDoesNotRaiseAdaptiveLimit: while the upstream refuses
// connections, its fast 502s say nothing about its capacity, so the
// adaptive limit (and the pools' seats) must not rise. Lease.Answered's
// contract is "the upstream answered"; a 502 is not an answer.
func TestUpstreamDownDoesNotRaiseAdaptiveLimit(t *testing.T) {
	base, _, srv, fp := startFaulty(t, func(c *Config) {
		c.Admission.Adaptive = &shed.AdaptiveConfig{Min: 1, Max: 64, Initial: 4, MaxLatency: 100 * time.Millisecond}
		for name, tier := range c.Tenants.Tiers {
			tier.Rate, tier.Burst, tier.MaxConcurrent = 1e6, 1e6, 0
			c.Tenants.Tiers[name] = tier
		}
		c.Admission.Global = nil
	}, Options{})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	t.Cleanup(client.CloseIdleConnections) // before the gateway's drain
	fp.Set(faultproxy.Fault{Mode: faultproxy.Drop})
	seats := func() int {
		st, _ := srv.Gate().TenantState("acme")
		return st.PoolStats.Seats
	}
	before := seats()
	statuses := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				req, _ := http.NewRequest("GET", base+"/api/v1/users/me", nil)
				req.Header.Set("Authorization", "Bearer demo-enterprise-key")
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				mu.Lock()
				statuses[resp.StatusCode]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	waitReleased(t, srv, "acme")
	after := seats()
	t.Logf("statuses %v; enterprise pool seats %d -> %d", statuses, before, after)
	if statuses[502] == 0 {
		t.Fatalf("no 502 while the upstream was down: %v", statuses)
	}
	if after > before {
		t.Fatalf("seats rose %d -> %d while the upstream was down", before, after)
	}
}

// TestSlowClientDoesNotTeachAdaptiveLimit: a client that takes longer than
// max_latency to send its body, or to read the answer, is not a slow
// upstream: the adaptive limit (and so every pool's seats) must not fall.
// With the permit timed around the client's I/O, each such request cut
// the limit.
func TestSlowClientDoesNotTeachAdaptiveLimit(t *testing.T) {
	base, up, srv := startGateway(t, func(c *Config) {
		a := *c.Admission.Adaptive
		a.MaxLatency = 100 * time.Millisecond
		c.Admission.Adaptive = &a
	}, Options{})
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write(make([]byte, 64<<10))
	}
	seats := func() int {
		st, _ := srv.Gate().TenantState("acme")
		return st.PoolStats.Seats
	}
	before := seats()
	for range 3 {
		pr, pw := io.Pipe()
		go func() {
			for range 3 {
				pw.Write([]byte("chunk"))
				time.Sleep(60 * time.Millisecond) // the slow client: 180 ms of body, bounded
			}
			pw.Close()
		}()
		req, _ := http.NewRequest("POST", base+"/api/v1/upload", pr)
		req.Header.Set("Authorization", "Bearer demo-pro-key")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		// ...and reads the answer slowly too.
		time.Sleep(150 * time.Millisecond)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if after := seats(); after < before {
		t.Fatalf("enterprise seats %d -> %d: slow clients taught the adaptive limit the upstream is slow", before, after)
	}
}
