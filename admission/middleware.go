package admission

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// Middleware returns the gate as net/http middleware, for a service that
// embeds it: next is the upstream. Requests the pipeline admits go on to
// next with X-Tenant-Id and X-Tenant-Tier set; the others get the
// client-contract rejection and next never sees them (nor is their body
// read). The request's lease is started just before next runs, answered
// when next returns with the request's context still alive, and released
// after.
func (g *Gate) Middleware(next http.Handler) http.Handler {
	return g.middleware(next, upstreamIsNext)
}

// ProxyMiddleware is Middleware for a reverse proxy: it reads the request
// body into memory (bounded by the limit the caller put on r.Body) after
// the cheap layers and before the bulkhead queue (see Request.ReadBody and
// bufferBody), and next, which makes the upstream call, finds the lease
// with FromContext and calls its StartUpstream and Answered around the
// call, so the adaptive limit times the upstream alone. The middleware
// releases the lease when next returns.
func (g *Gate) ProxyMiddleware(next http.Handler) http.Handler {
	return g.middleware(next, upstreamCalledByNext)
}

// upstreamCall says where the upstream call is, for the lease.
type upstreamCall uint8

const (
	upstreamIsNext       upstreamCall = iota // the wrapped handler is the upstream
	upstreamCalledByNext                     // the wrapped handler calls it and drives the lease
)

func (g *Gate) middleware(next http.Handler, call upstreamCall) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		red := g.StartRequest()
		prio, hasPrio := g.trustedPriority(r)
		stripClientHeaders(r.Header)
		ctx := r.Context()
		req := Request{Method: r.Method, Path: r.URL.Path, RawPath: r.URL.RawPath, Header: r.Header, RemoteAddr: r.RemoteAddr,
			Priority: prio, HasPriority: hasPrio}
		if call == upstreamCalledByNext && r.Body != http.NoBody && ctx.Value(streamedBodyKey{}) == nil {
			req.bodyOf = r
		}
		d, err := g.check(ctx, req)
		if err != nil {
			// The client went away while we decided; nobody reads this.
			w.WriteHeader(StatusClientClosedRequest)
			red.Decided(&d)
			red.Answered(StatusClientClosedRequest)
			return
		}
		// What the request keeps is allocated once, now that the
		// decision says which: an admitted request's state (its decision,
		// which the handler reads from the context, and the text of its
		// headers), or a rejection's header text alone.
		var st *admitted
		var t *answerText
		dp := &d
		if d.Allowed {
			st = &admitted{Context: ctx, d: d} // d's lease moves: nothing holds it yet
			dp, t = &st.d, &st.text
		} else {
			t = new(answerText)
		}
		lease := dp.Lease()
		if dp.Allowed && call == upstreamIsNext && !lease.StartUpstream(ctx) {
			dp.reject(ReasonLimitReached, time.Second)
		}
		h := w.Header()
		reqID := h.Get(HeaderRequestID)
		if reqID == "" {
			var id [16]byte
			reqID = t.set(h, HeaderRequestID, AppendRequestID(id[:0]))
		}
		// An HTTP/1 request's announced body is unread here (bufferBody
		// reads it only once the cheap layers admitted it); HTTP/2 resets
		// a refused stream instead of closing the connection.
		bodyUnread := r.ContentLength != 0 && r.ProtoMajor == 1
		buf := rejectBuffers.Get().(*rejectBuffer)
		status, body := g.decided(ctx, dp, reqID, bodyUnread, buf, func(key string, v []byte) { t.set(h, key, v) })
		if status != 0 {
			// From the pooled buffer's last rendering when it is the same
			// (rejectBuffer.reject): under a flood it is.
			w.WriteHeader(status)
			w.Write(body)
			rejectBuffers.Put(buf)
			red.Decided(dp)
			red.Answered(status)
			return
		}
		rejectBuffers.Put(buf)
		tw := &st.tw
		tw.ResponseWriter = w
		defer func() {
			p := recover()
			if p != nil && call == upstreamIsNext {
				lease.UpstreamFailed() // the handler, the upstream here, did not answer
			}
			if name, trailer, ok := lease.SettleField(); ok {
				lease.ReportUsage(usageOf(w.Header(), name, trailer))
			}
			if st := lease.settle.st; st != nil && st.on != nil {
				lease.settle.status = grpcOutcome(w.Header(), lease.settle.status)
			}
			lease.Release()
			abort := p != nil && g.handlerPanicked(tw, p, reqID)
			red.Decided(dp) // after the upstream call, which the adaptive limit may have refused
			red.Answered(tw.status)
			if abort {
				panic(http.ErrAbortHandler)
			}
		}()
		if g.cfg.Load().hideCredentials {
			hideCredential(r.Header, dp.credential)
		}
		if dp.Tenant != nil { // nil on an auth: none route
			t.setString(r.Header, HeaderTenantID, dp.Tenant.ID)
			t.setString(r.Header, HeaderTenantTier, dp.Tenant.Tier)
		}
		next.ServeHTTP(tw, r.WithContext(st))
		if call == upstreamIsNext && ctx.Err() == nil {
			lease.AnsweredStatus(cmp.Or(tw.status, http.StatusOK))
		}
	})
}

// admitted is what an admitted request keeps while the handler runs, in
// one allocation: the request's context, which carries the decision
// (FromContext), the writer that notes the response has begun, and the
// text of the headers the gate set.
type admitted struct {
	context.Context
	d    Decision
	tw   trackingWriter
	text answerText
}

// Value returns the request's decision for decisionKey, and defers to the
// parent context for every other key.
func (a *admitted) Value(key any) any {
	if _, ok := key.(decisionKey); ok {
		return &a.d
	}
	return a.Context.Value(key)
}

// handlerPanicked contains a panic in the handler behind the middleware
// (embedded use): what the request held is already released, the panic is
// logged, and the client gets a 500 if nothing was written yet. Other
// requests are unaffected. It reports whether the connection must be
// aborted instead (panic with http.ErrAbortHandler), as net/http does for
// http.ErrAbortHandler itself and for a panic after the response began.
func (g *Gate) handlerPanicked(tw *trackingWriter, p any, reqID string) (abort bool) {
	if p == http.ErrAbortHandler {
		return true
	}
	g.log.Error("handler panicked", "request_id", reqID, "panic", fmt.Sprint(p))
	if tw.status != 0 {
		return true
	}
	WriteReason(tw, ReasonHandlerPanic, 0, reqID, "")
	return false
}

// trackingWriter notes the response's status once it has begun (0
// before), so a panic handler knows whether a 500 can still be sent and
// the RED metrics what was answered.
type trackingWriter struct {
	http.ResponseWriter
	status int
}

func (t *trackingWriter) WriteHeader(code int) {
	if code >= 200 && t.status == 0 {
		t.status = code
	}
	t.ResponseWriter.WriteHeader(code)
}

func (t *trackingWriter) Write(b []byte) (int, error) {
	if t.status == 0 {
		t.status = http.StatusOK
	}
	return t.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer (flush,
// hijack, deadlines).
func (t *trackingWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// logDecision logs d at debug level: one line per decision, with the
// request ID (and the trace ID, when the logger's handler adds it from ctx).
// The API key never appears: only the tenant it identified.
func (g *Gate) logDecision(ctx context.Context, d *Decision, reqID string) {
	attrs := make([]slog.Attr, 0, 8)
	attrs = append(attrs, slog.String("request_id", reqID), slog.String("route", d.Route.Name))
	if d.Tenant != nil {
		attrs = append(attrs, slog.String("tenant", d.Tenant.ID), slog.String("tier", d.Tenant.Tier))
	}
	if d.Allowed {
		attrs = append(attrs, slog.String("decision", OutcomeAdmit))
	} else {
		attrs = append(attrs, slog.String("decision", OutcomeReject), slog.String("layer", d.Layer.String()),
			slog.String("reason", d.Reason.String()), slog.Int("status", d.Status), slog.Duration("retry_after", d.RetryAfter))
	}
	g.log.LogAttrs(ctx, slog.LevelDebug, "admission decision", attrs...)
}

type decisionKey struct{}

type streamedBodyKey struct{}

// WithStreamedBody marks ctx's request, for ProxyMiddleware, as one whose
// body is forwarded as it comes rather than read whole before the queue:
// a gRPC call's request stream, which does not end while the call runs
// (client and bidirectional streaming). Nothing of it is read before the
// request is admitted either way.
func WithStreamedBody(ctx context.Context) context.Context {
	return context.WithValue(ctx, streamedBodyKey{}, true)
}

// FromContext returns the decision of the request whose context ctx is, for
// handlers behind the middleware.
func FromContext(ctx context.Context) (*Decision, bool) {
	d, ok := ctx.Value(decisionKey{}).(*Decision)
	return d, ok
}
