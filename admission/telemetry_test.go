package admission

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/bulkhead"
)

func tracedGate(t testing.TB, rec sdktrace.SpanProcessor) (*Gate, *sdktrace.TracerProvider) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	cfg := testConfig()
	cfg.Bulkhead = &bulkhead.Config{Total: 8, Pools: map[string]bulkhead.PoolConfig{
		"enterprise": {Share: 50, QueueLength: 2, MaxWait: time.Second},
		"starter":    {Share: 50, QueueLength: 2, MaxWait: time.Second},
	}}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg, testRegistry(t), Options{TracerProvider: tp, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	return g, tp
}

// TestLayerSpans: an admitted request has a span per layer that ran, each
// a child of the request's span; a rejected one ends at the layer that
// said no, whose span has status Error with the reason, and so does the
// root once annotated.
func TestLayerSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	g, tp := tracedGate(t, rec)
	tr := tp.Tracer("test")

	check := func(key, path string) (Decision, []sdktrace.ReadOnlySpan) {
		ctx, root := tr.Start(context.Background(), SpanRequest)
		d, err := g.Check(ctx, req(key, "GET", path))
		if err != nil {
			t.Fatal(err)
		}
		d.Annotate(root)
		d.Lease().Release()
		root.End()
		var out []sdktrace.ReadOnlySpan
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID() == root.SpanContext().TraceID() {
				out = append(out, s)
			}
		}
		return d, out
	}
	names := func(spans []sdktrace.ReadOnlySpan) []string {
		var n []string
		for _, s := range spans {
			n = append(n, s.Name())
		}
		return n
	}

	d, spans := check("ent-key", "/api/v1/users/me")
	if !d.Allowed {
		t.Fatalf("rejected: %+v", d)
	}
	want := []string{SpanIdentify, SpanRate, SpanShed, SpanBulkhead, SpanRequest}
	if got := names(spans); len(got) != len(want) {
		t.Fatalf("spans %v, want %v", got, want)
	}
	root := spans[len(spans)-1]
	for i, s := range spans[:len(spans)-1] {
		if s.Name() != want[i] || s.Parent().SpanID() != root.SpanContext().SpanID() {
			t.Fatalf("span %d: %s (parent %s), want %s, child of the root", i, s.Name(), s.Parent().SpanID(), want[i])
		}
		if s.Status().Code == codes.Error {
			t.Fatalf("%s: error status on an admitted request", s.Name())
		}
	}

	// initech: 25 tokens, a search costs 5.
	for range 5 {
		check("start-key", "/api/v1/search")
	}
	d, spans = check("start-key", "/api/v1/search")
	if d.Allowed || d.Layer != LayerRate {
		t.Fatalf("sixth search: %+v", d)
	}
	if got := names(spans); len(got) != 3 || got[1] != SpanRate {
		t.Fatalf("rejected by rate: spans %v, want identify, rate, root", got)
	}
	if s := spans[1]; s.Status().Code != codes.Error || s.Status().Description != "rate: tenant_quota" {
		t.Fatalf("rate span status %+v", s.Status())
	}
	attrs := map[string]string{}
	for _, kv := range spans[2].Attributes() {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	for k, v := range map[string]string{"tenant.id": "initech", "tenant.tier": "starter", "route": "GET /api/v1/search",
		"admission.decision": "reject", "admission.rejected_by": "rate", "admission.reason": "tenant_quota"} {
		if attrs[k] != v {
			t.Errorf("root %s = %q, want %q", k, attrs[k], v)
		}
	}
	if spans[2].Status().Code != codes.Error {
		t.Errorf("root status %+v", spans[2].Status())
	}
}

// BenchmarkGateCheckObserved is BenchmarkGateCheck with metrics on and a
// recording request span in the context: what observability costs.
func BenchmarkGateCheckObserved(b *testing.B) {
	tp := sdktrace.NewTracerProvider() // records, exports nowhere
	ctx, root := tp.Tracer("bench").Start(context.Background(), SpanRequest)
	defer root.End()
	benchCheck(ctx, b, Options{TracerProvider: tp, Metrics: benchMetrics(b)})
}

// BenchmarkGateCheckMetrics is BenchmarkGateCheck with metrics on and
// tracing off.
func BenchmarkGateCheckMetrics(b *testing.B) {
	benchCheck(context.Background(), b, Options{Metrics: benchMetrics(b)})
}

func benchMetrics(b *testing.B) *Metrics {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	return m
}

// benchCheck runs admitted checks in parallel through a gate built with o.
func benchCheck(ctx context.Context, b *testing.B, o Options) {
	g, err := New(testConfig(), benchRegistry(b), o)
	if err != nil {
		b.Fatal(err)
	}
	runBenchCheck(ctx, b, g)
}

// runBenchCheck runs admitted checks of acme's users/me through g in
// parallel.
func runBenchCheck(ctx context.Context, b *testing.B, g *Gate) {
	r := req("ent-key", "GET", "/api/v1/users/me")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			d, _ := g.Check(ctx, r)
			if !d.Allowed || !d.Lease().StartUpstream(ctx) {
				b.Fatal("rejected")
			}
			d.Lease().Answered()
			d.Lease().Release()
		}
	})
}

// sharedStore stands for a store shared with other instances (Redis):
// any store but the embedded one.
type sharedStore struct{ *ratelimit.MemoryStore }

// TestStoreTakesTimed: fairgate_store_take_seconds times the takes of a
// shared store, and not those of the embedded store, whose takes cost
// less than the two clock reads that would time them.
func TestStoreTakesTimed(t *testing.T) {
	for _, c := range []struct {
		name  string
		store ratelimit.Store
		timed bool
	}{
		{"embedded", nil, false},
		{"shared", sharedStore{ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{})}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m, err := NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			g, err := New(testConfig(), testRegistry(t), Options{Metrics: m, Store: c.store})
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				mustCheck(t, g, req("ent-key", "GET", "/api/v1/users/me"))
			}
			mfs, err := reg.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var n uint64
			for _, mf := range mfs {
				if mf.GetName() == "fairgate_store_take_seconds" {
					n = mf.GetMetric()[0].GetHistogram().GetSampleCount()
				}
			}
			if timed := n > 0; timed != c.timed {
				t.Fatalf("%d takes timed of 3", n)
			}
		})
	}
}
