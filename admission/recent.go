package admission

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// DefaultRecentRejections is how many recent rejections the gate
// remembers for the console when Options.RecentRejections is zero;
// MaxRecentRejections is the most it may be asked to.
const (
	DefaultRecentRejections = 1000
	MaxRecentRejections     = 100_000
)

// maxRecentRequestID is the longest request ID a recent rejection keeps
// (fairgate's are 32 characters; a longer one a trusted proxy sent is cut).
const maxRecentRequestID = 64

// RecentRejection is one recent rejection, as the console lists it.
type RecentRejection struct {
	Time      time.Time `json:"time"`
	RequestID string    `json:"request_id"`
	// TraceID is the request's trace (32 hex digits); empty when tracing
	// is off.
	TraceID string `json:"trace_id,omitempty"`
	Tenant  string `json:"tenant,omitempty"`
	Tier    string `json:"tier,omitempty"`
	Route   string `json:"route,omitempty"`
	Layer   string `json:"layer"`
	Reason  string `json:"reason"`
	Status  int    `json:"status"`
	// RetryAfterMs is the layer's estimate of when a retry may succeed, in
	// milliseconds; the client's Retry-After is it in whole seconds,
	// rounded up, at least 1.
	RetryAfterMs float64 `json:"retry_after_ms"`
}

// recentRejections is a ring of the last rejections, kept whether or not
// anyone watches: whoever opens the console after an alert sees what
// happened before. An entry holds no string of the request's own (the
// request ID is copied into a fixed array, the trace ID kept as its 16
// bytes; tenant, tier and route are the config's), so recording one is a
// lock and a copy, and no allocation, even under a flood.
type recentRejections struct {
	mu   sync.Mutex
	ring []recentEntry
	next int // index of the next write
	n    int // entries held, up to len(ring)
}

// recentEntry is a RecentRejection as the ring keeps it.
type recentEntry struct {
	at                  time.Time
	reqID               [maxRecentRequestID]byte
	reqIDLen            uint8
	traceID             trace.TraceID // zero: tracing off
	tenant, tier, route string
	layer               Layer
	reason              Reason
	status              int
	retryAfter          time.Duration
}

// newRecentRejections returns a ring of n entries (DefaultRecentRejections
// when n is zero).
func newRecentRejections(n int) *recentRejections {
	if n <= 0 {
		n = DefaultRecentRejections
	}
	return &recentRejections{ring: make([]recentEntry, min(n, MaxRecentRejections))}
}

func (r *recentRejections) add(e *recentEntry) {
	r.mu.Lock()
	r.ring[r.next] = *e
	r.next = (r.next + 1) % len(r.ring)
	r.n = min(r.n+1, len(r.ring))
	r.mu.Unlock()
}

// list returns up to limit entries, newest first.
func (r *recentRejections) list(limit int) []RecentRejection {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := max(0, min(r.n, limit))
	out := make([]RecentRejection, 0, n)
	for i := 1; i <= n; i++ {
		e := &r.ring[(r.next-i+len(r.ring))%len(r.ring)]
		rr := RecentRejection{Time: e.at, RequestID: string(e.reqID[:e.reqIDLen]), Tenant: e.tenant, Tier: e.tier,
			Route: e.route, Layer: e.layer.String(), Reason: e.reason.String(), Status: e.status, RetryAfterMs: millis(e.retryAfter)}
		if e.traceID.IsValid() {
			rr.TraceID = e.traceID.String()
		}
		out = append(out, rr)
	}
	return out
}

// RecentRejections returns up to limit of the latest rejections, newest
// first.
func (g *Gate) RecentRejections(limit int) []RecentRejection { return g.recent.list(limit) }

// record counts a decision: the metrics, and for a rejection the tenant's
// last-minute counters and the recent rejections. reqID may be empty (Check, outside the middleware).
func (g *Gate) record(ctx context.Context, d *Decision, reqID string) {
	if g.metrics != nil {
		g.metrics.count(d)
	}
	if d.Allowed {
		return
	}
	now := g.now()
	tenantID := "" // requests without a valid key count under ""
	if d.Tenant != nil {
		tenantID = d.Tenant.ID
	}
	g.rejections.get(tenantID).add(now, int(d.Layer), 1)
	e := recentEntry{at: now, tenant: tenantID, layer: d.Layer, reason: d.Reason, status: d.Status, retryAfter: d.RetryAfter}
	e.reqIDLen = uint8(copy(e.reqID[:], reqID))
	if d.Tenant != nil {
		e.tier = d.Tenant.Tier
	}
	if d.Route != nil {
		e.route = d.Route.Name
	}
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		e.traceID = sc.TraceID()
	}
	g.recent.add(&e)
}
