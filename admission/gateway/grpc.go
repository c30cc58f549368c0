package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/fairgate/fairgate/admission"
)

// grpcCodes maps the statuses of fairgate's own answers to gRPC status
// codes; any other is UNKNOWN (2).
var grpcCodes = map[int]int{
	http.StatusTooManyRequests:             8,  // RESOURCE_EXHAUSTED: you sent too much
	http.StatusServiceUnavailable:          14, // UNAVAILABLE: we are overloaded; retry after the pushback
	http.StatusUnauthorized:                16, // UNAUTHENTICATED
	http.StatusRequestEntityTooLarge:       8,  // RESOURCE_EXHAUSTED, as grpc-go for an oversized message
	http.StatusRequestHeaderFieldsTooLarge: 8,
	http.StatusBadRequest:                  3,  // INVALID_ARGUMENT
	http.StatusNotImplemented:              12, // UNIMPLEMENTED
	http.StatusGatewayTimeout:              4,  // DEADLINE_EXCEEDED
	http.StatusBadGateway:                  14, // UNAVAILABLE
	http.StatusInternalServerError:         13, // INTERNAL
	admission.StatusClientClosedRequest:    1,  // CANCELLED
}

// isGRPC reports whether r is a gRPC call.
func isGRPC(r *http.Request) bool {
	ct := r.Header.Get("Content-Type")
	return r.ProtoMajor == 2 && strings.HasPrefix(ct, "application/grpc") &&
		(len(ct) == len("application/grpc") || ct[len("application/grpc")] == '+' || ct[len("application/grpc")] == ';')
}

type grpcAnswerKey struct{}

// grpcAnswer is a gRPC call's response writer: fairgate's own answers
// become trailers-only gRPC responses; once the upstream has answered
// (upstreamAnswering), everything passes through.
//
// A gRPC client reads its call's outcome from grpc-status, not from the
// HTTP status: grpc-go maps a bare HTTP 429 to UNAVAILABLE, and an HTTP 503
// with a JSON body to a status without fairgate's message or retry delay.
// So an answer of fairgate's own to a gRPC call (a rejection, or the
// edge's or proxy's failure) is sent as a gRPC "trailers-only" response:
// HTTP 200, content-type application/grpc, and grpc-status (grpcCodes),
// grpc-message and grpc-retry-pushback-ms in its header, beside the
// RateLimit fields, Retry-After and X-Request-Id it has as any answer.
type grpcAnswer struct {
	http.ResponseWriter
	upstream bool // the upstream's response is being written
	status   int  // fairgate's own answer's HTTP status, 0 until it comes
	done     bool
}

// withGRPCAnswer returns w and r for a gRPC call's answers, and a func
// that ends an answer left without a body; for other requests, w and r
// as they are.
func withGRPCAnswer(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, *http.Request, func()) {
	if !isGRPC(r) {
		return w, r, func() {}
	}
	ga := &grpcAnswer{ResponseWriter: w}
	// The call's request stream goes upstream as it comes: a client or
	// bidirectional stream does not end while the call runs.
	ctx := admission.WithStreamedBody(context.WithValue(r.Context(), grpcAnswerKey{}, ga))
	return ga, r.WithContext(ctx), func() { ga.finish("") }
}

// upstreamAnswering tells the gRPC writer of ctx's request, if any, that
// the upstream's response follows.
func upstreamAnswering(ctx context.Context) {
	if ga, ok := ctx.Value(grpcAnswerKey{}).(*grpcAnswer); ok {
		ga.upstream = true
	}
}

func (g *grpcAnswer) WriteHeader(code int) {
	if g.upstream || g.status != 0 || code < 200 {
		g.ResponseWriter.WriteHeader(code)
		return
	}
	g.status = code
}

func (g *grpcAnswer) Write(b []byte) (int, error) {
	if g.upstream || g.status == 0 {
		return g.ResponseWriter.Write(b)
	}
	var rej admission.Rejection
	_ = json.Unmarshal(b, &rej) // the contract's JSON body: its message becomes grpc-message
	g.finish(rej.Message)
	return len(b), nil
}

// finish sends fairgate's own answer, once, as a trailers-only response.
func (g *grpcAnswer) finish(msg string) {
	if g.upstream || g.status == 0 || g.done {
		return
	}
	g.done = true
	h := g.Header()
	code, ok := grpcCodes[g.status]
	if !ok {
		code = 2 // UNKNOWN
	}
	h.Set("Content-Type", "application/grpc")
	h.Del("Content-Length")
	h.Del("Connection")
	h.Set("Grpc-Status", strconv.Itoa(code))
	if msg != "" {
		h.Set("Grpc-Message", grpcPercentEncode(msg))
	}
	if ra, err := strconv.Atoi(h.Get("Retry-After")); err == nil && ra > 0 {
		h.Set("Grpc-Retry-Pushback-Ms", strconv.Itoa(ra*1000))
	}
	g.ResponseWriter.WriteHeader(http.StatusOK)
}

func (g *grpcAnswer) Flush() {
	if g.upstream || g.status == 0 {
		http.NewResponseController(g.ResponseWriter).Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (g *grpcAnswer) Unwrap() http.ResponseWriter { return g.ResponseWriter }

// grpcPercentEncode encodes a grpc-message as the gRPC spec says: every
// byte outside printable ASCII, and '%', as %XX.
func grpcPercentEncode(s string) string {
	const hexd = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c <= 0x7e && c != '%' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexd[c>>4])
		b.WriteByte(hexd[c&0xf])
	}
	return b.String()
}
