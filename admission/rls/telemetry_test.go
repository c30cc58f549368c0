package rls

import (
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fairgate/fairgate/internal/fakeclock"
)

// TestOneSpanPerCall: each call is one admission.rls span naming the
// domain, the configured descriptor that decided and its outcome; labels
// and attributes never carry a request's values.
func TestOneSpanPerCall(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reg := prometheus.NewRegistry()
	tel, err := NewTelemetry(TelemetryOptions{TracerProvider: tp, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, Config{}, mustLoad(t, "testdata/edge.yaml"), Options{Telemetry: tel})
	for range 4 {
		h.call(t, request("edge", 0, desc("remote_address", "1.2.3.4"), desc("path", "/login")))
	}
	h.call(t, request("elsewhere", 0, desc("remote_address", "1.2.3.4")))
	spans := rec.Ended()
	if len(spans) != 5 {
		t.Fatalf("%d spans for 5 calls", len(spans))
	}
	attrs := func(i int) map[attribute.Key]string {
		m := map[attribute.Key]string{}
		for _, kv := range spans[i].Attributes() {
			m[kv.Key] = kv.Value.Emit()
		}
		return m
	}
	for i, want := range []map[attribute.Key]string{
		{AttrDomain: "edge", AttrDescriptor: "path=/login", AttrOutcome: "admit", attrDecision: "admit"},
		{AttrDomain: "edge", AttrDescriptor: "path=/login", AttrOutcome: "reject", attrDecision: "reject"},
		{AttrDomain: "unknown", attrDecision: "admit"},
	} {
		idx := []int{0, 3, 4}[i]
		if spans[idx].Name() != SpanRLS {
			t.Errorf("span %d named %q", idx, spans[idx].Name())
		}
		got := attrs(idx)
		for k, v := range want {
			if got[k] != v {
				t.Errorf("span %d: %s=%q, want %q (all: %v)", idx, k, got[k], v, got)
			}
		}
	}
	if n := testutil.ToFloat64(tel.decisions.WithLabelValues("edge", "path=/login", OutcomeReject)); n != 1 {
		t.Errorf("rejections counted %v, want 1", n)
	}
	if n := testutil.ToFloat64(tel.decisions.WithLabelValues("unknown", "none", OutcomeNoLimit)); n != 1 {
		t.Errorf("unknown domain counted %v, want 1", n)
	}
	// The key-only descriptor is labelled by its configured key, never
	// by the address the request sent.
	if n := testutil.ToFloat64(tel.decisions.WithLabelValues("edge", "remote_address", OutcomeAdmit)); n != 4 {
		t.Errorf("remote_address admits counted %v, want 4", n)
	}
}

// TestShadowLogBounded: shadow rejections are logged at most once per
// interval per descriptor, however many there are.
func TestShadowLogBounded(t *testing.T) {
	var buf strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), nil))
	clock := fakeclock.New()
	tel, err := NewTelemetry(TelemetryOptions{Logger: log, ShadowLogEvery: time.Minute, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, Config{}, mustLoad(t, "testdata/shadow"), Options{Telemetry: tel})
	lines := func() int {
		mu.Lock()
		defer mu.Unlock()
		return strings.Count(buf.String(), "would have rejected")
	}
	for range 20 {
		h.call(t, request("rollout", 0, desc("user", "ann")))
		h.call(t, request("rollout", 0, desc("user", "bo")))
	}
	if n := lines(); n != 1 {
		t.Fatalf("%d shadow log lines for 34 shadow rejections of one descriptor, want 1", n)
	}
	clock.Advance(time.Minute)
	h.call(t, request("rollout", 0, desc("user", "ann")))
	if n := lines(); n != 2 {
		t.Fatalf("a minute later: %d shadow log lines, want 2", n)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
