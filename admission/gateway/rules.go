package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/fairgate/fairgate/admission"
)

// clientForwarding are the fields of a client's request that would tell
// the upstream who sent it or where its trace comes from: fairgate sets
// its own X-Forwarded-* (from a trusted proxy's, forwardingFields) and
// trace parent, so a client's never go upstream.
var clientForwarding = []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto",
	"Forwarded", "X-Real-Ip", "Baggage", "Traceparent", "Tracestate"}

// upstreamFailure is what an upstream call that failed becomes: a reason
// of the contract, or 499 when the client had gone (logged, never seen).
type upstreamFailure struct {
	reason     admission.Reason
	clientGone bool
}

// upstreamFailed maps a failed upstream call's err to the contract: 413
// when the body outgrew the limit while streaming, 499 when the client
// went away (ctx done), 504 on a timeout, 502 otherwise. It logs the
// failure; the caller releases the lease (release: the adaptive limit
// learns nothing) and writes the answer (answer).
func (s *Server) upstreamFailed(ctx context.Context, err error, reqID string) upstreamFailure {
	var mbe *http.MaxBytesError
	var te interface{ Timeout() bool } // net.Error's, and fasthttp.ErrTimeout's
	switch {
	case errors.As(err, &mbe):
		return upstreamFailure{reason: admission.ReasonBodyTooLarge}
	case ctx.Err() != nil:
		s.log.InfoContext(ctx, "client closed request", "request_id", reqID, "status", admission.StatusClientClosedRequest)
		return upstreamFailure{clientGone: true}
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &te) && te.Timeout():
		s.log.WarnContext(ctx, "upstream timeout", "request_id", reqID, "err", err)
		return upstreamFailure{reason: admission.ReasonUpstreamTimeout}
	default:
		s.log.WarnContext(ctx, "upstream error", "request_id", reqID, "err", err)
		return upstreamFailure{reason: admission.ReasonUpstreamUnreachable}
	}
}

// release gives back the request's lease l after the failure f: a call
// the upstream did not answer (a timeout, an unreachable upstream) is
// recorded as such (Lease.UpstreamFailed); a client that went away, or a
// body over the limit, says nothing of the upstream.
func (f upstreamFailure) release(l *admission.Lease) {
	if f.clientGone || f.reason == admission.ReasonBodyTooLarge {
		l.Release()
		return
	}
	l.UpstreamFailed()
}

// answer writes f to w (for the fasthttp engine, w is its fastAnswer).
func (f upstreamFailure) answer(w http.ResponseWriter, reqID string) {
	if f.clientGone {
		w.WriteHeader(admission.StatusClientClosedRequest)
		return
	}
	admission.WriteReason(w, f.reason, 0, reqID, "")
}

// upstreamRateLimitName is the name an upstream's response field k takes
// on its way to the client: the upstream's own RateLimit* and
// X-RateLimit-* fields become Upstream-RateLimit*, so that the client sees
// fairgate's RateLimit fields alone (not "RateLimit-Remaining: 24, 999")
// and can still read the upstream's under their own name. ok is false for
// every other field, which keeps its name.
func upstreamRateLimitName(k string) (string, bool) {
	if !hasPrefixFold(k, "Ratelimit") && !hasPrefixFold(k, "X-Ratelimit") {
		return "", false
	}
	return "Upstream-" + strings.TrimPrefix(http.CanonicalHeaderKey(k), "X-"), true
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// forwardingFields are the X-Forwarded-For and -Proto the upstream gets for
// a request from peer (whose IP is peerIP) that carried the
// X-Forwarded-For fields xff and the X-Forwarded-Proto xfp, where proto is
// fairgate's own scheme ("http" or "https"), and the client's address. From
// a trusted proxy the proxies' chain goes on with the peer appended, the
// proxy's scheme stands, and the client is the chain's (clientOf); from
// any other peer the fields are fairgate's own and the peer is the client.
func (tp trustedProxies) forwardingFields(peer, peerIP string, xff []string, xfp, proto string) (fwdFor, fwdProto, client string) {
	client, via := tp.clientOf(peer, xff)
	if !via {
		return peerIP, proto, peer
	}
	fwdFor, fwdProto = peerIP, proto
	if len(xff) > 0 {
		fwdFor = strings.Join(xff, ", ") + ", " + peerIP
	}
	if xfp != "" {
		fwdProto = xfp
	}
	return fwdFor, fwdProto, client
}

// announcedTooLarge answers 413 on w, before the pipeline runs, when a
// request announces a body (length, -1 when unknown) over max_body_bytes,
// and reports whether it did. A body of unknown length is bounded while
// it is read instead.
func announcedTooLarge(w http.ResponseWriter, length, max int64, reqID string) bool {
	if length <= max {
		return false
	}
	admission.WriteReason(w, admission.ReasonBodyTooLarge, 0, reqID, "")
	return true
}
