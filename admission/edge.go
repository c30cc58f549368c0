package admission

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// decided is what every stack does once the pipeline has decided request
// reqID, in one place: it records, traces and logs d, and sets the
// answer's fields with set (buf lends the rendering its buffers). A
// rejection's status and JSON body are returned for the caller to write
// (valid until buf goes back to the pool); when the request announced a
// body (bodyUnread) that the pipeline did not read, its connection closes
// after the answer, which then goes at once rather than after the body,
// or instead of reading one nobody will use. An admitted request gets its
// RateLimit fields, and status 0.
func (g *Gate) decided(ctx context.Context, d *Decision, reqID string, bodyUnread bool, buf *rejectBuffer, set func(key string, v []byte)) (status int, body []byte) {
	g.record(ctx, d, reqID)
	if sp := trace.SpanFromContext(ctx); sp.IsRecording() {
		d.Annotate(sp)
	}
	if g.log.Enabled(ctx, slog.LevelDebug) {
		g.logDecision(ctx, d, reqID)
	}
	if !d.Allowed {
		status, body = buf.reject(d, reqID, set)
		if bodyUnread && !d.bodyRead {
			set("Connection", connClose)
		}
		return status, body
	}
	buf.msg = setRateLimitHeaders(d, buf.msg[:0], set)
	return 0, nil
}

// Exchange is one request and its answer as an HTTP stack other than
// net/http hands them to the pipeline (the gateway's fasthttp edge): Admit
// reads and changes the request's header fields and sets the answer's
// through it. Values passed to it are valid only during the call.
type Exchange interface {
	// RequestHeader returns the request's value of the header key
	// (canonical), "" when it has none.
	RequestHeader(key string) string
	// StripRequestHeaders deletes the request's header fields whose
	// names strip reports true for. strip must not keep the name it is
	// given: it may be a view of the request's buffer.
	StripRequestHeaders(strip func(name string) bool)
	// DelRequestHeader and SetRequestHeader change the request the
	// upstream is sent.
	DelRequestHeader(key string)
	SetRequestHeader(key, value string)
	// SetAnswerHeader sets a header field of the response.
	SetAnswerHeader(key string, v []byte)
	// Answer writes the response's status and body: a rejection's.
	Answer(status int, body []byte)
}

// Admit is what the middleware does, for an HTTP stack other than net/http:
// it reads a trusted caller's priority, decides req, records and logs the
// decision, and sets the answer's RateLimit fields on x. A rejection is
// written to x in full. An admitted request has the headers a client may
// not set stripped, its X-Tenant-Id and X-Tenant-Tier set on x's request,
// and its credential removed when the config hides credentials; the caller
// then drives the decision's lease (StartUpstream, AnsweredStatus or
// UpstreamFailed, Release), and records the request in the RED metrics
// (StartRequest when it arrives, Decided with the decision, Answered once
// the answer is written). reqID is the request's X-Request-Id, already on
// the answer. The error is
// ctx's, when the client went away while the pipeline decided. The
// pipeline keeps none of req's strings (path, header values) past the
// call, so they may be views of the caller's buffers.
func (g *Gate) Admit(ctx context.Context, req Request, x Exchange, reqID string) (Decision, error) {
	req.Priority, req.HasPriority = g.trustedPriorityOf(x.RequestHeader(HeaderPriority), req.RemoteAddr)
	d, err := g.check(ctx, req)
	if err != nil {
		return d, err
	}
	buf := rejectBuffers.Get().(*rejectBuffer)
	defer rejectBuffers.Put(buf)
	if status, body := g.decided(ctx, &d, reqID, req.BodyUnread, buf, x.SetAnswerHeader); status != 0 {
		x.Answer(status, body)
		return d, nil
	}
	// Only a request that goes on to the upstream needs its client-set
	// fields stripped: the pipeline read none of them.
	x.StripRequestHeaders(IsClientHeader)
	if k := credentialHeader(d.credential); k != "" && g.cfg.Load().hideCredentials {
		x.DelRequestHeader(k)
	}
	if d.Tenant != nil { // nil on an auth: none route
		x.SetRequestHeader(HeaderTenantID, d.Tenant.ID)
		x.SetRequestHeader(HeaderTenantTier, d.Tenant.Tier)
	}
	return d, nil
}
