package gateway

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairgate/fairgate/admission"
	"github.com/fairgate/fairgate/internal/tailsample"
)

// DefaultTracesKept is how many rejected traces a TraceRing keeps when
// NewTraceRing is given zero.
const DefaultTracesKept = 300

// TraceRing keeps the last rejected traces in memory, so the console can
// show why a request was rejected without a Jaeger UI: it is a span
// processor placed behind the tail sampler (which already holds a trace's
// spans until its root ends and passes on every rejected trace), beside
// the exporter. See NewTracerProvider and NewConsoleTracerProvider.
//
// When full, it forgets the oldest trace of the tenant that has the most:
// a tenant's flood of rejections does not push out the few traces of the
// tenant who asks why it was rejected.
//
// It costs nothing for a request whose trace the tail sampler drops; a
// trace it passes on for the admitted ratio is held until its root ends and
// then forgotten. Safe for concurrent use.
type TraceRing struct {
	max int

	mu       sync.Mutex
	pending  map[trace.TraceID][]sdktrace.ReadOnlySpan // children waiting for their root
	byTenant map[string][]*Trace                       // each tenant's, oldest first
	n        int                                       // traces kept, up to max
	byTrace  map[trace.TraceID]*Trace
	byReq    map[string]*Trace
}

// maxPendingTraces bounds the traces whose children wait for their root; a
// root that never comes (a crashed request) would otherwise hold them
// forever. Beyond it the waiting children are forgotten.
const maxPendingTraces = 4096

var _ sdktrace.SpanProcessor = (*TraceRing)(nil)

// NewTraceRing returns a TraceRing keeping the last n rejected traces
// (zero means DefaultTracesKept).
func NewTraceRing(n int) *TraceRing {
	if n <= 0 {
		n = DefaultTracesKept
	}
	return &TraceRing{max: n, pending: map[trace.TraceID][]sdktrace.ReadOnlySpan{}, byTenant: map[string][]*Trace{},
		byTrace: map[trace.TraceID]*Trace{}, byReq: map[string]*Trace{}}
}

// Trace is one rejected request's trace as the console draws it.
type Trace struct {
	TraceID   string    `json:"trace_id"`
	RequestID string    `json:"request_id"`
	Time      time.Time `json:"time"`
	Tenant    string    `json:"tenant,omitempty"`
	Route     string    `json:"route,omitempty"`
	// RejectedBy is the layer that said no, Reason its word.
	RejectedBy string `json:"rejected_by,omitempty"`
	Reason     string `json:"reason,omitempty"`
	Status     int64  `json:"status,omitempty"`
	// Spans are the trace's spans, the root first, then by start time.
	Spans []Span `json:"spans"`
}

// Span is one span of a Trace.
type Span struct {
	SpanID   string `json:"span_id"`
	ParentID string `json:"parent_id,omitempty"`
	Name     string `json:"name"`
	// StartMs is the span's start after the root's, DurationMs its length,
	// both in milliseconds.
	StartMs    float64 `json:"start_ms"`
	DurationMs float64 `json:"duration_ms"`
	// Error is the span's status description when its status is Error.
	Error      string         `json:"error,omitempty"`
	Attributes map[string]any `json:"attributes"`
	// SaidNo marks the layer span that rejected the request.
	SaidNo bool `json:"said_no,omitempty"`
}

// OnStart does nothing.
func (r *TraceRing) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd holds a child until its root ends; a rejected root makes a Trace
// of them.
func (r *TraceRing) OnEnd(s sdktrace.ReadOnlySpan) {
	id := s.SpanContext().TraceID()
	parent := s.Parent()
	r.mu.Lock()
	defer r.mu.Unlock()
	if parent.IsValid() && !parent.IsRemote() {
		if _, ok := r.pending[id]; !ok && len(r.pending) >= maxPendingTraces {
			clear(r.pending)
		}
		r.pending[id] = append(r.pending[id], s)
		return
	}
	children := r.pending[id]
	delete(r.pending, id)
	if attr(s, admission.AttrDecision).AsString() != admission.OutcomeReject {
		return
	}
	r.addLocked(newTrace(s, children))
}

func (r *TraceRing) addLocked(t *Trace) {
	if r.n >= r.max {
		r.evictLocked()
	}
	r.byTenant[t.Tenant] = append(r.byTenant[t.Tenant], t)
	r.n++
	r.byTrace[hexTraceID(t.TraceID)] = t
	if t.RequestID != "" {
		r.byReq[t.RequestID] = t
	}
}

// evictLocked forgets the oldest trace of the tenant with the most traces
// (tenants are few: configured ones, and "" for requests without a key).
func (r *TraceRing) evictLocked() {
	most := ""
	for id, ts := range r.byTenant {
		if len(ts) > len(r.byTenant[most]) || len(ts) == len(r.byTenant[most]) && id < most {
			most = id
		}
	}
	ts := r.byTenant[most]
	if len(ts) == 0 {
		return
	}
	old := ts[0]
	ts[0] = nil
	if ts = ts[1:]; len(ts) == 0 {
		delete(r.byTenant, most)
	} else {
		r.byTenant[most] = ts
	}
	r.n--
	if r.byTrace[hexTraceID(old.TraceID)] == old {
		delete(r.byTrace, hexTraceID(old.TraceID))
	}
	if r.byReq[old.RequestID] == old {
		delete(r.byReq, old.RequestID)
	}
}

func hexTraceID(s string) trace.TraceID {
	id, _ := trace.TraceIDFromHex(s)
	return id
}

// Find returns the kept trace with the given trace ID (32 hex digits) or
// request ID.
func (r *TraceRing) Find(id string) (*Trace, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if tid, err := trace.TraceIDFromHex(id); err == nil {
		if t, ok := r.byTrace[tid]; ok {
			return t, true
		}
	}
	t, ok := r.byReq[id]
	return t, ok
}

// Len returns how many traces are kept.
func (r *TraceRing) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// Shutdown forgets what waits for a root.
func (r *TraceRing) Shutdown(context.Context) error {
	r.mu.Lock()
	clear(r.pending)
	r.mu.Unlock()
	return nil
}

// ForceFlush does nothing: nothing is exported.
func (r *TraceRing) ForceFlush(context.Context) error { return nil }

// attr returns s's attribute key (an empty value when absent).
func attr(s sdktrace.ReadOnlySpan, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes() {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// newTrace builds the console's view of a rejected root and its children.
func newTrace(root sdktrace.ReadOnlySpan, children []sdktrace.ReadOnlySpan) *Trace {
	t := &Trace{TraceID: root.SpanContext().TraceID().String(), Time: root.StartTime(),
		RequestID: attr(root, admission.AttrRequestID).AsString(), Tenant: attr(root, admission.AttrTenantID).AsString(),
		Route: attr(root, admission.AttrRoute).AsString(), RejectedBy: attr(root, admission.AttrRejectedBy).AsString(),
		Reason: attr(root, admission.AttrReason).AsString(), Status: attr(root, admission.AttrStatusCode).AsInt64()}
	saidNo := "admission." + t.RejectedBy
	t.Spans = append(t.Spans, newSpan(root, root.StartTime(), ""))
	for _, c := range children {
		t.Spans = append(t.Spans, newSpan(c, root.StartTime(), saidNo))
	}
	return t
}

func newSpan(s sdktrace.ReadOnlySpan, origin time.Time, saidNo string) Span {
	sp := Span{SpanID: s.SpanContext().SpanID().String(), Name: s.Name(),
		StartMs: msBetween(origin, s.StartTime()), DurationMs: msBetween(s.StartTime(), s.EndTime()),
		Attributes: make(map[string]any, len(s.Attributes()))}
	if p := s.Parent(); p.IsValid() && !p.IsRemote() {
		sp.ParentID = p.SpanID().String()
	}
	if s.Status().Code == codes.Error {
		sp.Error = s.Status().Description
		sp.SaidNo = s.Name() == saidNo
	}
	for _, kv := range s.Attributes() {
		v := kv.Value.AsInterface()
		if f, ok := v.(float64); ok && (math.IsInf(f, 0) || math.IsNaN(f)) {
			v = fmt.Sprint(f) // JSON has no Inf or NaN
		}
		sp.Attributes[string(kv.Key)] = v
	}
	return sp
}

func msBetween(a, b time.Time) float64 { return math.Round(float64(b.Sub(a))/1e4) / 100 }

// NewConsoleTracerProvider returns a tracer provider that exports nothing
// and keeps every rejected trace in ring, for the console: what `fairgate
// demo` runs when no OTLP endpoint is configured. Every request's spans are
// recorded, so a production gateway without tracing should not use it.
func NewConsoleTracerProvider(ring *TraceRing) *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithSpanProcessor(tailsample.New(ring, tailsample.Config{
			Keep: tailsample.KeepAttr(admission.AttrDecision, admission.OutcomeAdmit),
		})),
	)
}

// fanout passes every span to each of its processors.
type fanout []sdktrace.SpanProcessor

func (f fanout) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) {
	for _, p := range f {
		p.OnStart(ctx, s)
	}
}

func (f fanout) OnEnd(s sdktrace.ReadOnlySpan) {
	for _, p := range f {
		p.OnEnd(s)
	}
}

func (f fanout) Shutdown(ctx context.Context) error {
	return f.each(func(p sdktrace.SpanProcessor) error { return p.Shutdown(ctx) })
}

func (f fanout) ForceFlush(ctx context.Context) error {
	return f.each(func(p sdktrace.SpanProcessor) error { return p.ForceFlush(ctx) })
}

// each calls fn on every processor and returns the first error.
func (f fanout) each(fn func(sdktrace.SpanProcessor) error) error {
	var first error
	for _, p := range f {
		if err := fn(p); err != nil && first == nil {
			first = err
		}
	}
	return first
}
