package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fairgate/fairgate/admission"
	"github.com/fairgate/fairgate/internal/tracelog"
	"github.com/fairgate/fairgate/tenant"
)

// scrape GETs /metrics from the admin listener and parses it.
func scrape(t *testing.T, srv *Server) map[string]*dto.MetricFamily {
	t.Helper()
	adm := httptest.NewServer(srv.AdminHandler())
	defer adm.Close()
	resp, err := http.Get(adm.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// sample returns the value of the series of family name whose labels
// include want (counter, gauge, or a histogram's count), and how many
// series matched.
func sample(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (float64, int) {
	mf := mfs[name]
	if mf == nil {
		return 0, 0
	}
	var sum float64
	n := 0
next:
	for _, m := range mf.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if got[k] != v {
				continue next
			}
		}
		n++
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum, n
}

// TestMetricsCountWhatWasSent sends a known mix of requests and checks that
// /metrics on the admin listener counts exactly them, by tenant, tier,
// route, layer and outcome.
func TestMetricsCountWhatWasSent(t *testing.T) {
	reg := prometheus.NewRegistry()
	base, _, srv := startGateway(t, nil, Options{Metrics: reg})
	for range 3 {
		if r := do(t, "GET", base+"/api/v1/users/me", "demo-enterprise-key", nil); r.status != 200 {
			t.Fatalf("acme: %d", r.status)
		}
	}
	limited := 0
	for range 7 { // initech: 25 tokens, 5 a search: 5 admitted, 2 rejected
		if r := do(t, "GET", base+"/api/v1/search", "demo-starter-key", nil); r.status == 429 {
			limited++
		}
	}
	for range 2 {
		do(t, "GET", base+"/api/v1/users/me", "wrong-key", nil)
	}
	do(t, "GET", base+"/not/a/route/12345", "demo-pro-key", nil)
	srv.RecordReload(nil)
	srv.RecordReload(errors.New("bad file"))

	mfs := scrape(t, srv)
	for _, c := range []struct {
		labels map[string]string
		want   float64
	}{
		{map[string]string{"tenant": "acme", "tier": "enterprise", "route": "GET /api/v1/users/me", "layer": "none", "outcome": "admit"}, 3},
		{map[string]string{"tenant": "initech", "tier": "starter", "route": "GET /api/v1/search", "layer": "none", "outcome": "admit"}, float64(7 - limited)},
		{map[string]string{"tenant": "initech", "route": "GET /api/v1/search", "layer": "rate", "outcome": "reject"}, float64(limited)},
		{map[string]string{"tenant": "", "layer": "identify", "outcome": "reject"}, 2},
		{map[string]string{"tenant": "globex", "route": "unmatched", "outcome": "admit"}, 1},
		{map[string]string{}, 13},
	} {
		if got, _ := sample(mfs, "fairgate_decisions_total", c.labels); got != c.want {
			t.Errorf("fairgate_decisions_total%v = %v, want %v", c.labels, got, c.want)
		}
	}
	if limited != 2 {
		t.Errorf("initech was limited %d times, want 2", limited)
	}
	// No label carries a raw path or a key.
	for _, m := range mfs["fairgate_decisions_total"].Metric {
		for _, l := range m.Label {
			if strings.Contains(l.GetValue(), "12345") || strings.Contains(l.GetValue(), "key") {
				t.Errorf("label %s=%q", l.GetName(), l.GetValue())
			}
		}
	}
	// Every admitted request waited (zero or more) in a pool.
	if got, _ := sample(mfs, "fairgate_queue_wait_seconds", nil); got != float64(3+7-limited+1) {
		t.Errorf("queue waits observed: %v, want %v", got, 3+7-limited+1)
	}
	for _, name := range []string{"fairgate_pool_in_flight", "fairgate_pool_queued", "fairgate_pool_seats", "fairgate_shed_threshold"} {
		if _, n := sample(mfs, name, nil); n != 3 {
			t.Errorf("%s: %d series, want one per pool (3)", name, n)
		}
	}
	if got, _ := sample(mfs, "fairgate_pool_in_flight", nil); got != 0 {
		t.Errorf("in flight after the requests: %v", got)
	}
	// The embedded store's takes are not timed (admission.TestStoreTakesTimed).
	if got, _ := sample(mfs, "fairgate_store_take_seconds", nil); got != 0 {
		t.Errorf("%v takes of the embedded store timed", got)
	}
	for result, want := range map[string]float64{"ok": 1, "error": 1} {
		if got, _ := sample(mfs, "fairgate_config_reloads_total", map[string]string{"result": result}); got != want {
			t.Errorf("reloads %s: %v, want %v", result, got, want)
		}
	}
	// The shared store's families are not there on the embedded store:
	// zeros there would say nothing (the dashboard would show a Redis).
	for name := range mfs {
		if strings.HasPrefix(name, "fairgate_store_") {
			t.Errorf("the embedded store exports %s", name)
		}
	}
	if got, _ := sample(mfs, "fairgate_instances", nil); got != 1 {
		t.Errorf("fairgate_instances %v on the embedded store, want 1", got)
	}
}

// TestLogsCarryIDsNeverKeys runs the gateway with tracing (in memory) and a
// debug JSON log, and checks that every line about a request carries its
// request ID and trace ID, and no line carries an API key.
func TestLogsCarryIDsNeverKeys(t *testing.T) {
	var mu sync.Mutex
	var buf bytes.Buffer
	log := slog.New(tracelog.New(slog.NewJSONHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelDebug})))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	base, up, _ := startGateway(t, nil, Options{Logger: log, TracerProvider: tp})
	keys := []string{"demo-enterprise-key", "demo-starter-key", "a-guessed-key-0042"}
	ids := map[string]string{} // request ID -> trace ID
	for _, k := range keys {
		r := do(t, "GET", base+"/api/v1/users/me", k, map[string]string{"Traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
		ids[r.header.Get("X-Request-Id")] = r.header.Get(HeaderTraceID)
	}
	// The client's traceparent is a link, not the parent, and the upstream
	// sees the gateway's own.
	if got := up.last().Header.Get("Traceparent"); strings.Contains(got, "0af7651916cd43dd8448eb211c80319c") || got == "" {
		t.Errorf("upstream traceparent %q", got)
	}
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	for _, k := range keys {
		if strings.Contains(out, k) {
			t.Fatalf("the logs carry the API key %q:\n%s", k, out)
		}
	}
	perRequest := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		reqID, _ := m["request_id"].(string)
		if reqID == "" {
			continue
		}
		perRequest++
		if want, ok := ids[reqID]; !ok || m["trace_id"] != want {
			t.Errorf("line %s: trace_id %v, want %v", line, m["trace_id"], want)
		}
	}
	// Each request: the admission decision and the access line.
	if perRequest != 2*len(keys) {
		t.Errorf("%d lines about requests, want %d:\n%s", perRequest, 2*len(keys), out)
	}
	for _, s := range rec.Ended() {
		if s.Name() == "fairgate.request" && len(s.Links()) != 1 {
			t.Errorf("root span has %d links, want the client's context as one", len(s.Links()))
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func TestTracerProviderFromConfigAndEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	ctx := context.Background()
	if tp, err := NewTracerProvider(ctx, nil, env(nil)); tp != nil || err != nil {
		t.Fatalf("no section, no env: %v %v, want off", tp, err)
	}
	if _, err := NewTracerProvider(ctx, &TracingConfig{}, env(nil)); err == nil || !strings.Contains(err.Error(), "tracing.endpoint") {
		t.Fatalf("section without endpoint: %v", err)
	}
	tp, err := NewTracerProvider(ctx, nil, env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}))
	if err != nil || tp == nil {
		t.Fatalf("env only: %v %v", tp, err)
	}
	tp.Shutdown(ctx)
	if _, err := NewTracerProvider(ctx, nil, env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"})); err == nil {
		t.Fatal("unknown protocol in env accepted")
	}
	for _, c := range []struct {
		yaml, field string
	}{
		{"tracing: {endpoint: 'localhost:4317'}", "tracing.endpoint"},
		{"tracing: {endpoint: 'http://127.0.0.1:4318', protocol: thrift}", "tracing.protocol"},
		{"tracing: {endpoint: 'http://127.0.0.1:4318', sample_admitted: 1.5}", "tracing.sample_admitted"},
	} {
		_, err := Parse([]byte(minimalConfig + c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: error %v, want one naming %s", c.yaml, err, c.field)
		}
	}
	cfg, err := Parse([]byte(minimalConfig + "tracing: {endpoint: 'http://127.0.0.1:4318', protocol: grpc, sample_admitted: 0.5, service_name: edge}"))
	if err != nil {
		t.Fatal(err)
	}
	if tc := cfg.Tracing; tc.Protocol != ProtocolGRPC || *tc.SampleAdmitted != 0.5 || tc.ServiceName != "edge" {
		t.Fatalf("parsed %+v", tc)
	}
}

const minimalConfig = `
upstream: http://127.0.0.1:8081
tiers: {free: {burst: 10, rate: 1}}
tenants: [{id: a, tier: free, api_keys_sha256: [de0803c110d4918c188f575cd1cfd0ca434455288d93ae16c150520e604a6234]}]
`

// TestMetricsCardinalityBounded: hundreds of random keys and raw paths add
// no label values: tenants are the configured ones (or none), routes are
// templates or "unmatched".
func TestMetricsCardinalityBounded(t *testing.T) {
	base, _, srv := startGateway(t, func(c *Config) {
		c.Admission.Unauthenticated = &tenant.Quota{Rate: 1e6, Burst: 1e6}
	}, Options{})
	client := &http.Client{}
	defer client.CloseIdleConnections()
	for i := range 300 {
		path := fmt.Sprintf("/api/v1/users/%d/raw-%d", i, i*7)
		req, _ := http.NewRequest("GET", base+path, nil)
		if i%2 == 0 {
			req.Header.Set("X-API-Key", fmt.Sprintf("random-key-%d", i))
		} else {
			req.Header.Set("X-API-Key", "demo-pro-key")
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	allowed := map[string]map[string]bool{
		"tenant": {"": true, "acme": true, "globex": true, "initech": true},
		"route":  {"": true, "unmatched": true, "GET /api/v1/users/me": true, "GET /api/v1/search": true, "POST /api/v1/reports/export": true},
	}
	mfs := scrape(t, srv)
	for name, mf := range mfs {
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if ok, bounded := allowed[l.GetName()]; bounded && !ok[l.GetValue()] {
					t.Errorf("%s has %s=%q: unbounded label value", name, l.GetName(), l.GetValue())
				}
			}
		}
	}
	// Not vacuous: the requests were counted, under the labels allowed.
	if n, _ := sample(mfs, "fairgate_decisions_total", map[string]string{"tenant": "globex", "route": "unmatched"}); n != 150 {
		t.Fatalf("globex's unmatched decisions counted %v, want 150", n)
	}
}

// TestKeepRootKeepsShadowRejections: the tail sampler keeps every
// rejected trace and every trace shadow mode admitted, and leaves plain
// admissions to the ratio.
func TestKeepRootKeepsShadowRejections(t *testing.T) {
	for _, tc := range []struct {
		name  string
		attrs []attribute.KeyValue
		keep  bool
	}{
		{"admitted", []attribute.KeyValue{admission.AttrDecision.String(admission.OutcomeAdmit)}, false},
		{"rejected", []attribute.KeyValue{admission.AttrDecision.String(admission.OutcomeReject)}, true},
		{"shadow", []attribute.KeyValue{admission.AttrShadowReject.Bool(true), admission.AttrDecision.String(admission.OutcomeAdmit)}, true},
	} {
		if got := keepRoot(tracetest.SpanStub{Name: admission.SpanRequest, Attributes: tc.attrs}.Snapshot()); got != tc.keep {
			t.Errorf("%s: keep %v, want %v", tc.name, got, tc.keep)
		}
	}
}

// TestRuntimeMetrics: the server's own registry carries the Go runtime's
// and the process's metrics beside fairgate's; a caller's registry is left
// as the caller made it (it may hold them already).
func TestRuntimeMetrics(t *testing.T) {
	_, _, srv := startGateway(t, nil, Options{})
	mfs := scrape(t, srv)
	want := []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "go_gc_duration_seconds", "fairgate_config_reloads_total"}
	if runtime.GOOS == "linux" {
		want = append(want, "process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds")
	}
	for _, name := range want {
		if mfs[name] == nil {
			t.Errorf("/metrics has no %s", name)
		}
	}
	_, _, own := startGateway(t, nil, Options{Metrics: prometheus.NewRegistry()})
	if mfs := scrape(t, own); mfs["go_goroutines"] != nil {
		t.Error("a caller's registry got the Go collector registered on it")
	}
}
