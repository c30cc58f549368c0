package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/fairgate/fairgate/shed"
	"go.opentelemetry.io/otel/trace"
)

// Header names the gate sets. Clients' own copies of them (and anything
// else that looks like a tenant or rate-limit header) are deleted before the
// pipeline runs, so neither fairgate nor the upstream ever trusts them.
const (
	HeaderRequestID  = "X-Request-Id"
	HeaderTenantID   = "X-Tenant-Id"
	HeaderTenantTier = "X-Tenant-Tier"
	HeaderPriority   = "X-Fairgate-Priority"
)

// Middleware returns the gate as net/http middleware: requests the pipeline
// admits go on to next with X-Tenant-Id and X-Tenant-Tier set; the others
// get the client-contract rejection and next never sees them (nor is their
// body read).
func (g *Gate) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		prio, hasPrio := g.trustedPriority(r)
		stripClientHeaders(r.Header)
		reqID := w.Header().Get(HeaderRequestID)
		if reqID == "" {
			reqID = NewRequestID()
			w.Header().Set(HeaderRequestID, reqID)
		}
		d, err := g.Check(r.Context(), Request{Method: r.Method, Path: r.URL.Path, Header: r.Header, RemoteAddr: r.RemoteAddr,
			Priority: prio, HasPriority: hasPrio})
		if err != nil {
			// The client went away while we decided; nobody reads this.
			w.WriteHeader(StatusClientClosedRequest)
			return
		}
		if sp := trace.SpanFromContext(r.Context()); sp.IsRecording() {
			d.Annotate(sp)
		}
		if g.log.Enabled(r.Context(), slog.LevelDebug) {
			g.logDecision(r.Context(), &d, reqID)
		}
		writeRateLimitHeaders(w.Header(), &d)
		if !d.Allowed {
			WriteRejection(w, &d, reqID)
			return
		}
		tw := &trackingWriter{ResponseWriter: w}
		ok := false
		defer func() {
			d.Done(ok)
			if p := recover(); p != nil {
				g.handlerPanicked(tw, p, reqID)
			}
		}()
		r.Header.Set(HeaderTenantID, d.Tenant.ID)
		r.Header.Set(HeaderTenantTier, d.Tenant.Tier)
		next.ServeHTTP(tw, r.WithContext(context.WithValue(r.Context(), decisionKey{}, &d)))
		ok = r.Context().Err() == nil
	})
}

// handlerPanicked contains a panic in the handler behind the middleware
// (embedded use): what the request held is already released, the panic is
// logged, and the client gets a 500 if nothing was written yet. Other
// requests are unaffected. http.ErrAbortHandler, and a panic after the
// response began, abort the connection as net/http does.
func (g *Gate) handlerPanicked(tw *trackingWriter, p any, reqID string) {
	if p == http.ErrAbortHandler {
		panic(p)
	}
	g.log.Error("handler panicked", "request_id", reqID, "panic", fmt.Sprint(p))
	if tw.wrote {
		panic(http.ErrAbortHandler)
	}
	WriteError(tw, http.StatusInternalServerError, &Rejection{Error: "internal_error", Layer: "upstream",
		Reason: "handler_panic", RequestID: reqID, Message: "The request failed inside the service."})
}

// trackingWriter notes whether the response has begun, so a panic handler
// knows whether a 500 can still be sent.
type trackingWriter struct {
	http.ResponseWriter
	wrote bool
}

func (t *trackingWriter) WriteHeader(code int) {
	if code >= 200 {
		t.wrote = true
	}
	t.ResponseWriter.WriteHeader(code)
}

func (t *trackingWriter) Write(b []byte) (int, error) {
	t.wrote = true
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
			slog.String("reason", d.Reason), slog.Int("status", d.Status), slog.Duration("retry_after", d.RetryAfter))
	}
	g.log.LogAttrs(ctx, slog.LevelDebug, "admission decision", attrs...)
}

// Echo returns the gate as Echo middleware.
func (g *Gate) Echo() echo.MiddlewareFunc { return echo.WrapMiddleware(g.Middleware) }

// StatusClientClosedRequest is nginx's 499: the client closed the connection
// before the response. It is logged, never seen by the client.
const StatusClientClosedRequest = 499

type decisionKey struct{}

// FromContext returns the decision of the request whose context ctx is, for
// handlers behind the middleware.
func FromContext(ctx context.Context) (*Decision, bool) {
	d, ok := ctx.Value(decisionKey{}).(*Decision)
	return d, ok
}

// trustedPriority returns the X-Fairgate-Priority of a request from a
// network in trusted_priority_from, when it is a whole number in 0–499.
func (g *Gate) trustedPriority(r *http.Request) (shed.Priority, bool) {
	trusted := g.cfg.Load().trusted
	if len(trusted) == 0 {
		return 0, false
	}
	v := r.Header.Get(HeaderPriority)
	if v == "" {
		return 0, false
	}
	addr, err := netip.ParseAddr(clientIP(r.RemoteAddr))
	if err != nil {
		return 0, false
	}
	addr = addr.Unmap()
	for _, p := range trusted {
		if p.Contains(addr) {
			n, err := strconv.Atoi(v)
			if err != nil || n < int(shed.MinPriority) || n > int(shed.MaxPriority) {
				return 0, false
			}
			return shed.Priority(n), true
		}
	}
	return 0, false
}

// stripClientHeaders deletes every header a client might use to pass itself
// off as a tenant, fake a quota or raise its own priority.
func stripClientHeaders(h http.Header) {
	for k := range h {
		// Compare with '_' read as '-': CGI-style upstreams (WSGI, Rack,
		// PHP) map X_Tenant_Id and X-Tenant-Id to the same variable.
		if hasPrefixFoldUnderscore(k, "X-Tenant-") || hasPrefixFoldUnderscore(k, "Ratelimit") ||
			hasPrefixFoldUnderscore(k, "X-Ratelimit") || hasPrefixFoldUnderscore(k, HeaderPriority) && len(k) == len(HeaderPriority) {
			delete(h, k)
		}
	}
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// hasPrefixFoldUnderscore is a case-insensitive HasPrefix in which '_' in s
// matches '-' in prefix.
func hasPrefixFoldUnderscore(s, prefix string) bool {
	if len(s) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		c, p := lower(s[i]), lower(prefix[i])
		if c == '_' {
			c = '-'
		}
		if c != p {
			return false
		}
	}
	return true
}

func NewRequestID() string {
	var b [16]byte
	const hexd = "0123456789abcdef"
	a, c := rand.Uint64(), rand.Uint64()
	for i := range 8 {
		b[i] = hexd[(a>>(4*i))&0xf]
		b[8+i] = hexd[(c>>(4*i))&0xf]
	}
	return string(b[:])
}

// Rejection is the JSON body of every rejection.
type Rejection struct {
	// Error is "unauthorized", "rate_limited" or "overloaded".
	Error string `json:"error"`
	// Message explains the rejection to a person.
	Message string `json:"message"`
	// Layer names the pipeline layer that said no.
	Layer string `json:"layer"`
	// Reason is the layer's machine word ("tenant_quota", "queue_full", …).
	Reason string `json:"reason"`
	// RetryAfter repeats the Retry-After header, in whole seconds.
	RetryAfter int64 `json:"retry_after"`
	// RequestID is the X-Request-Id of the request.
	RequestID string `json:"request_id"`
}

// WriteRejection writes d's rejection: status, Retry-After and the JSON
// body. It is the one place a rejection becomes a response.
func WriteRejection(w http.ResponseWriter, d *Decision, reqID string) {
	body := Rejection{Layer: d.Layer.String(), Reason: d.Reason, RequestID: reqID}
	h := w.Header()
	switch d.Status {
	case http.StatusUnauthorized:
		body.Error = "unauthorized"
		body.Message = "A valid API key is required: send it as \"Authorization: Bearer KEY\" or \"X-API-Key: KEY\"."
		if d.Reason == "unknown_key" {
			body.Message = "The API key is not valid."
		}
		h.Set("WWW-Authenticate", `Bearer realm="fairgate"`)
	case http.StatusTooManyRequests:
		body.Error = "rate_limited"
		body.RetryAfter = ceilSeconds(d.RetryAfter, 1)
		body.Message = tooManyMessage(d, body.RetryAfter)
	default:
		body.Error = "overloaded"
		body.RetryAfter = ceilSeconds(d.RetryAfter, 1)
		body.Message = "The service is overloaded (" + d.Layer.String() + ": " + d.Reason + "); this is not your quota. Retry after " + strconv.FormatInt(body.RetryAfter, 10) + "s."
	}
	WriteError(w, d.Status, &body)
}

// WriteError writes a JSON error body with status, and Retry-After when
// body.RetryAfter is set. Edge errors (413, 502, 504) use it too, so every
// error a client sees from fairgate has the same shape.
func WriteError(w http.ResponseWriter, status int, body *Rejection) {
	h := w.Header()
	if body.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(body.RetryAfter, 10))
	}
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	b, _ := json.Marshal(body) // a struct of strings and ints cannot fail
	w.Write(append(b, '\n'))
}

func tooManyMessage(d *Decision, retry int64) string {
	after := " Retry after " + strconv.FormatInt(retry, 10) + "s."
	switch d.Reason {
	case "tenant_quota":
		return "Tenant " + d.Tenant.ID + " is over its " + d.Tenant.Tier + " rate quota (" + d.Route.Name + " costs " + strconv.FormatFloat(d.Route.Cost, 'f', -1, 64) + " tokens)." + after
	case "group_quota":
		return "Tenant " + d.Tenant.ID + " is over its quota for " + d.Route.Group + " requests." + after
	case "too_many_failed_attempts":
		return "Too many requests without a valid API key from this address." + after
	case "max_concurrent":
		return "Tenant " + d.Tenant.ID + " has too many requests in flight." + after
	}
	return "Too many requests." + after
}

// writeRateLimitHeaders sets the IETF draft's RateLimit-Policy and
// RateLimit structured fields and the widely deployed RateLimit-Limit,
// -Remaining and -Reset (for the bucket with the fewest tokens left).
func writeRateLimitHeaders(h http.Header, d *Decision) {
	if d.NQuotas == 0 {
		return
	}
	// All five values are written into one buffer, made one string and
	// sliced: two allocations instead of a dozen.
	var arr [256]byte
	b := arr[:0]
	var ends [5]int
	low := 0
	for i := range d.NQuotas {
		q := &d.Quotas[i]
		if q.Name == "" {
			continue
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = AppendPolicy(b, q)
		if q.Remaining < d.Quotas[low].Remaining {
			low = i
		}
	}
	ends[0] = len(b)
	first := true
	for i := range d.NQuotas {
		q := &d.Quotas[i]
		if q.Name == "" {
			continue
		}
		if !first {
			b = append(b, ", "...)
		}
		first = false
		b = AppendState(b, q)
	}
	ends[1] = len(b)
	q := &d.Quotas[low]
	b = strconv.AppendInt(b, int64(q.Limit), 10)
	ends[2] = len(b)
	b = strconv.AppendInt(b, int64(q.Remaining), 10)
	ends[3] = len(b)
	b = strconv.AppendInt(b, ceilSeconds(q.Reset, 0), 10)
	ends[4] = len(b)
	all := string(b)
	vals := make([]string, 5)
	start := 0
	for i, end := range ends {
		vals[i] = all[start:end]
		start = end
	}
	h["Ratelimit-Policy"] = vals[0:1:1]
	h["Ratelimit"] = vals[1:2:2]
	h["Ratelimit-Limit"] = vals[2:3:3]
	h["Ratelimit-Remaining"] = vals[3:4:4]
	h["Ratelimit-Reset"] = vals[4:5:5]
}

// AppendPolicy appends q as an item of the RateLimit-Policy field:
// "name";q=LIMIT;w=WINDOW, the window in whole seconds (at least 1).
func AppendPolicy(b []byte, q *QuotaState) []byte {
	b = appendSFString(b, q.Name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, int64(q.Limit), 10)
	b = append(b, ";w="...)
	return strconv.AppendInt(b, ceilSeconds(q.Window, 1), 10)
}

// AppendState appends q as an item of the RateLimit field:
// "name";r=REMAINING;t=RESET, remaining rounded down, reset in whole seconds
// rounded up.
func AppendState(b []byte, q *QuotaState) []byte {
	b = appendSFString(b, q.Name)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, int64(q.Remaining), 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, ceilSeconds(q.Reset, 0), 10)
}

// appendSFString appends s as an RFC 8941 sf-string: in double quotes, with
// '"' and '\\' escaped by a backslash and any byte outside printable ASCII
// replaced by '?' (the syntax allows nothing else, and a header must never
// carry CR, LF or NUL).
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
