package gateway

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"

	"github.com/valyala/fasthttp"
)

// forwarded is forwardingFields for a request from remote (whose IP is
// host) with header h, over proto (http or https).
func (e *fastEdge) forwarded(h *fasthttp.RequestHeader, remote, host, proto string) (fwdFor, fwdProto, client string) {
	var xff []string
	for _, v := range h.PeekAll("X-Forwarded-For") {
		xff = append(xff, string(v))
	}
	return e.s.trusted.forwardingFields(remote, host, xff, string(h.Peek("X-Forwarded-Proto")), proto)
}

// brokenBeforeAnswer reports whether err is how a connection the upstream
// had closed fails a request on it: the read of the answer's first byte
// ends (io.EOF, or a reset), or the write of the request does.
func brokenBeforeAnswer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

var http11 = []byte("HTTP/1.1")

// idempotent reports whether req's method is idempotent (RFC 9110 §9.2.2).
func idempotent(req *fasthttp.Request) bool {
	h := &req.Header
	return h.IsGet() || h.IsHead() || h.IsPut() || h.IsDelete() || h.IsOptions() || h.IsTrace()
}

// peerOf is the address of rc's peer and its host, from its edgeConn.
func peerOf(rc *fasthttp.RequestCtx) (remote, host string) {
	if c, ok := rc.Conn().(*edgeConn); ok {
		return c.remote, c.host
	}
	remote = rc.RemoteAddr().String()
	return remote, hostOf(remote)
}

// hostOf is addr ("host:port") without its port.
func hostOf(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// methodOf returns m as a string, without allocating for the common
// methods.
func methodOf(m []byte) string {
	switch string(m) {
	case http.MethodGet:
		return http.MethodGet
	case http.MethodPost:
		return http.MethodPost
	case http.MethodHead:
		return http.MethodHead
	case http.MethodPut:
		return http.MethodPut
	case http.MethodDelete:
		return http.MethodDelete
	}
	return string(m)
}

// hopByHop are the header fields that concern one connection only (RFC
// 9110 §7.6.1), never forwarded, and Http2-Settings (no h2c upgrade).
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade", "Http2-Settings"}

// removeHopByHop deletes h's hop-by-hop fields and those its Connection
// field names.
func removeHopByHop(h *fasthttp.RequestHeader) {
	if c := h.Peek("Connection"); len(c) > 0 {
		for _, f := range strings.Split(string(c), ",") {
			if f = strings.TrimSpace(f); f != "" {
				h.Del(f)
			}
		}
	}
	delFields(h, hopByHop)
}

// delFields deletes h's fields named in names (at most 64). It scans h's
// fields once and deletes only those it has: each Del scans them all.
func delFields(h *fasthttp.RequestHeader, names []string) {
	var has uint64 // bit i: h has names[i]
	for k := range h.All() {
		for i, n := range names {
			if len(k) == len(n) && bytes.EqualFold(k, s2b(n)) {
				has |= 1 << i
			}
		}
	}
	for i, n := range names {
		if has&(1<<i) != 0 {
			h.Del(n)
		}
	}
}

// renameFastRateLimit renames h's RateLimit fields as
// upstreamRateLimitName says.
func renameFastRateLimit(h *fasthttp.ResponseHeader) {
	var renamed []string
	for k, v := range h.All() {
		if to, ok := upstreamRateLimitName(b2s(k)); ok {
			renamed = append(renamed, string(k), to, string(v))
		}
	}
	for i := 0; i < len(renamed); i += 3 {
		h.Del(renamed[i])
	}
	for i := 0; i < len(renamed); i += 3 {
		h.Add(renamed[i+1], renamed[i+2])
	}
}
