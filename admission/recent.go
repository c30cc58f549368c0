package admission

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// RecentRejectionsKept is how many recent rejections the gate remembers for
// the console.
const RecentRejectionsKept = 200

// watchFor is how long after the last look at the console the gate keeps
// recording recent rejections.
const watchFor = 30 * time.Second

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

// recentRejections is a ring of the last rejections. It records only while
// someone is watching (Watch was called in the last watchFor), so an
// unwatched gate pays one atomic load per rejection for it.
type recentRejections struct {
	mu   sync.Mutex
	ring [RecentRejectionsKept]RecentRejection
	next int // index of the next write
	n    int // entries held, up to len(ring)
}

func (r *recentRejections) add(e RecentRejection) {
	r.mu.Lock()
	r.ring[r.next] = e
	r.next = (r.next + 1) % len(r.ring)
	r.n = min(r.n+1, len(r.ring))
	r.mu.Unlock()
}

// list returns up to limit entries, newest first.
func (r *recentRejections) list(limit int) []RecentRejection {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := min(r.n, limit)
	out := make([]RecentRejection, 0, n)
	for i := 1; i <= n; i++ {
		out = append(out, r.ring[(r.next-i+len(r.ring))%len(r.ring)])
	}
	return out
}

// Watch tells the gate someone is looking at the console now: it records
// recent rejections for the next 30 seconds.
func (g *Gate) Watch() { g.watchedUntil.Store(int64(g.now().Add(watchFor).Sub(g.epoch))) }

// RecentRejections returns up to limit of the latest rejections, newest
// first, recorded while someone watched (see Watch).
func (g *Gate) RecentRejections(limit int) []RecentRejection { return g.recent.list(limit) }

// record counts a decision: the metrics, and for a rejection the tenant's
// last-minute counters and, while the console is watched, the recent
// rejections. reqID may be empty (Check, outside the middleware).
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
	if int64(now.Sub(g.epoch)) >= g.watchedUntil.Load() {
		return
	}
	e := RecentRejection{Time: now, RequestID: reqID, Tenant: tenantID, Layer: d.Layer.String(), Reason: d.Reason.String(),
		Status: d.Status, RetryAfterMs: millis(d.RetryAfter)}
	if d.Tenant != nil {
		e.Tier = d.Tenant.Tier
	}
	if d.Route != nil {
		e.Route = d.Route.Name
	}
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		e.TraceID = sc.TraceID().String()
	}
	g.recent.add(e)
}
