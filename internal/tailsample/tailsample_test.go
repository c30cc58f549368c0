package tailsample

import (
	"context"
	"math"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairgate/fairgate/internal/fakeclock"
)

const decision = attribute.Key("admission.decision")

func newProvider(t *testing.T, cfg Config) (trace.Tracer, *tracetest.SpanRecorder, *Processor) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	if cfg.Keep == nil {
		cfg.Keep = KeepAttr(decision, "admit")
	}
	p := New(rec, cfg)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSpanProcessor(p))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp.Tracer("test"), rec, p
}

// request makes one trace the way the gateway does: layer spans end before
// the root, whose attribute carries the outcome.
func request(tr trace.Tracer, outcome string) trace.TraceID {
	ctx, root := tr.Start(context.Background(), "fairgate.request")
	for _, name := range []string{"admission.identify", "admission.rate", "proxy.upstream"} {
		_, s := tr.Start(ctx, name)
		s.End()
	}
	root.SetAttributes(decision.String(outcome))
	root.End()
	return root.SpanContext().TraceID()
}

// traces groups the exported spans by trace ID.
func traces(rec *tracetest.SpanRecorder) map[trace.TraceID][]string {
	out := map[trace.TraceID][]string{}
	for _, s := range rec.Ended() {
		id := s.SpanContext().TraceID()
		out[id] = append(out[id], s.Name())
	}
	return out
}

func TestRejectedAlwaysKeptAdmittedDropped(t *testing.T) {
	tr, rec, p := newProvider(t, Config{Ratio: 0})
	var rejected []trace.TraceID
	for i := range 50 {
		if i%5 == 0 {
			rejected = append(rejected, request(tr, "reject"))
		} else {
			request(tr, "admit")
		}
	}
	got := traces(rec)
	if len(got) != len(rejected) {
		t.Fatalf("exported %d traces, want the %d rejected ones", len(got), len(rejected))
	}
	for _, id := range rejected {
		if n := len(got[id]); n != 4 {
			t.Fatalf("rejected trace %s: %d spans exported (%v), want 4: root and all children", id, n, got[id])
		}
	}
	if p.Pending() != 0 {
		t.Fatalf("%d traces still buffered", p.Pending())
	}
	if d := p.Dropped(); d != 40*4 {
		t.Fatalf("dropped %d spans, want %d", d, 40*4)
	}
}

func TestRatioKeepsWholeTraces(t *testing.T) {
	const n = 4000
	tr, rec, p := newProvider(t, Config{Ratio: 0.25})
	for range n {
		request(tr, "admit")
	}
	got := traces(rec)
	for id, spans := range got {
		if len(spans) != 4 {
			t.Fatalf("trace %s exported partly: %v", id, spans)
		}
	}
	// Binomial(4000, 0.25): sd ≈ 27; allow 5 sd.
	if want := 0.25 * n; math.Abs(float64(len(got))-want) > 5*math.Sqrt(n*0.25*0.75) {
		t.Fatalf("kept %d admitted traces of %d, want about %v", len(got), n, want)
	}
	if p.Pending() != 0 {
		t.Fatalf("%d traces still buffered", p.Pending())
	}
}

func TestRatioOneKeepsAll(t *testing.T) {
	tr, rec, _ := newProvider(t, Config{Ratio: 1})
	for range 20 {
		request(tr, "admit")
	}
	if got := len(traces(rec)); got != 20 {
		t.Fatalf("exported %d traces, want 20", got)
	}
}

// TestNoKeepNegativeControl: with a Keep that keeps nothing and ratio 0, a
// rejected trace is dropped too, so the tests above are about Keep.
func TestNoKeepNegativeControl(t *testing.T) {
	tr, rec, _ := newProvider(t, Config{Keep: func(sdktrace.ReadOnlySpan) bool { return false }})
	request(tr, "reject")
	if got := len(rec.Ended()); got != 0 {
		t.Fatalf("exported %d spans, want 0", got)
	}
}

func TestOrphansExpireAndBufferIsBounded(t *testing.T) {
	clk := fakeclock.New()
	tr, rec, p := newProvider(t, Config{MaxTraces: 3, MaxAge: time.Minute, Now: clk.Now})
	// Four roots that never end, each with a child that does.
	for range 4 {
		ctx, _ := tr.Start(context.Background(), "fairgate.request")
		_, c := tr.Start(ctx, "admission.rate")
		c.End()
	}
	if got, want := p.Pending(), 3; got != want {
		t.Fatalf("pending %d traces, want %d (the bound)", got, want)
	}
	if got := len(rec.Ended()); got != 1 {
		t.Fatalf("the child beyond the bound: exported %d, want 1", got)
	}
	clk.Advance(2 * time.Minute)
	request(tr, "admit") // a root ending sweeps
	if p.Pending() != 0 {
		t.Fatalf("pending %d traces after MaxAge, want 0", p.Pending())
	}
}
