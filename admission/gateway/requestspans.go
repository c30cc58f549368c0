package gateway

import (
	"context"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairgate/fairgate/admission"
)

// statusWriter remembers the response's status for the root span and the
// access log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush and deadlines.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// requestRecord is one request's root span, fairgate.request, and its
// access-log line (debug level): what both engines keep of a request, in
// one place. The zero value records nothing (tracing off, debug off).
type requestRecord struct {
	s              *Server
	sp             trace.Span // nil: tracing off
	logged         bool
	start          time.Time
	method, client string
	reqID          string
	ctx            context.Context
}

// beginRequest starts the record of the request reqID (method, from
// client "ip:port", its header fields in h): the root span when tracing
// is on, whose trace ID setTraceID gets for the answer (32 hex digits),
// and the clock for the access log when debug logging is on. A client's
// traceparent is not trusted as parent (a client could merge its requests
// into one trace or pick our sampling); it becomes a link. It returns the
// request's context, which carries the span.
func (s *Server) beginRequest(ctx context.Context, method, client, reqID string, h propagation.TextMapCarrier, setTraceID func([]byte)) (context.Context, requestRecord) {
	rec := requestRecord{s: s, method: method, client: client, reqID: reqID}
	if s.tel.tracer != nil {
		ctx, rec.sp = s.tel.startRequestSpan(ctx, method, client, h)
		var tid [32]byte
		tr := rec.sp.SpanContext().TraceID()
		setTraceID(hex.AppendEncode(tid[:0], tr[:]))
	}
	if rec.logged = s.log.Enabled(ctx, slog.LevelDebug); rec.sp != nil || rec.logged {
		rec.start = time.Now()
	}
	rec.ctx = ctx
	return ctx, rec
}

// active reports whether r records anything (else end need not run).
func (r *requestRecord) active() bool { return r.sp != nil || r.logged }

// end ends the record with the answer's status.
func (r *requestRecord) end(status int) {
	endRequest(r.sp, status, r.reqID)
	if r.logged {
		r.s.logRequest(r.ctx, r.method, r.client, status, r.reqID, r.start)
	}
}

// startRequestSpan starts the root span of a request whose method is
// method, whose client's address ("ip:port") is client and whose header
// fields h carries; a client's traceparent becomes a link. t.tracer must
// not be nil.
func (t *telemetry) startRequestSpan(ctx context.Context, method, client string, h propagation.TextMapCarrier) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", method), attribute.String("client.address", hostOf(client)))}
	if remote := trace.SpanContextFromContext(t.prop.Extract(context.Background(), h)); remote.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: remote}))
	}
	return t.tracer.Start(ctx, admission.SpanRequest, opts...)
}

// endRequest ends the root span with the response's status. A 5xx the
// admission layers did not explain (502, 504) is an error too, so the tail
// sampler keeps its trace.
func endRequest(sp trace.Span, status int, reqID string) {
	if sp == nil {
		return
	}
	sp.SetAttributes(admission.AttrStatusCode.Int(status), admission.AttrRequestID.String(reqID))
	if status >= 500 && !hasError(sp) {
		sp.SetStatus(codes.Error, "HTTP "+strconv.Itoa(status))
	}
	sp.End()
}

// hasError reports whether sp's status is already Error (set by the
// decision, whose description says more than the status code).
func hasError(sp trace.Span) bool {
	ro, ok := sp.(interface{ Status() sdktrace.Status })
	return ok && ro.Status().Code == codes.Error
}

// logRequest writes the access-log line (debug level): request ID, method,
// client address, status and duration; the logger's handler adds the trace
// ID from ctx.
func (s *Server) logRequest(ctx context.Context, method, client string, status int, reqID string, start time.Time) {
	s.log.LogAttrs(ctx, slog.LevelDebug, "request", slog.String("request_id", reqID), slog.String("method", method),
		slog.String("client", hostOf(client)),
		slog.Int("status", status), slog.Duration("duration", time.Since(start)))
}

// upstreamSpan wraps the reverse proxy in the proxy.upstream span. The
// proxy's Rewrite injects its traceparent into the upstream request.
func (t *telemetry) upstreamSpan(next http.Handler) http.Handler {
	if t.tracer == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, sp := t.tracer.Start(r.Context(), admission.SpanUpstream, trace.WithSpanKind(trace.SpanKindClient))
		defer sp.End()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// injectTrace replaces any client-sent trace headers on the upstream
// request with the proxy.upstream span's.
func (t *telemetry) injectTrace(out *http.Request) {
	// A client never chooses the upstream's trace parent: with tracing
	// on, the upstream gets the proxy.upstream span's; with it off, none
	// (the Rewrite has removed the client's, with clientForwarding).
	if t.tracer == nil {
		return
	}
	t.prop.Inject(out.Context(), propagation.HeaderCarrier(out.Header))
}

// upstreamAnswered records the upstream's status on the proxy.upstream span.
func upstreamAnswered(resp *http.Response) error {
	upstreamStatus(resp.Request.Context(), resp.StatusCode)
	return nil
}

// upstreamStatus records the upstream's status on ctx's proxy.upstream
// span, when it records.
func upstreamStatus(ctx context.Context, status int) {
	sp := trace.SpanFromContext(ctx)
	if !sp.IsRecording() {
		return
	}
	sp.SetAttributes(admission.AttrStatusCode.Int(status))
	if status >= 500 {
		sp.SetStatus(codes.Error, "upstream HTTP "+strconv.Itoa(status))
	}
}

// upstreamFailed records a proxy error on the proxy.upstream span.
func upstreamFailed(r *http.Request, err error) { spanFailed(r.Context(), err) }

// spanFailed records err on ctx's span, when it records.
func spanFailed(ctx context.Context, err error) {
	if sp := trace.SpanFromContext(ctx); sp.IsRecording() {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
}
