package gateway

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/fairgate/fairgate/admission"
)

// bufferRequests reads an admitted request's whole body (bounded by the
// body limit) before the proxy forwards it, as nginx does by default
// (proxy_request_buffering). Three things follow:
//
//   - a malformed chunked body is a 400 to the client, and the upstream
//     never sees a partial request;
//   - a body that outgrows the limit while streaming is a 413, and again the
//     upstream sees nothing;
//   - the upstream always receives a Content-Length and never a
//     Transfer-Encoding, so it cannot disagree with fairgate about where the
//     body ends (request smuggling). A request carrying both Content-Length
//     and Transfer-Encoding: chunked is decoded as chunked, as RFC 9112
//     §6.3 tells an intermediary to (Go's server has already dropped the
//     Content-Length by the time a handler runs), and forwarded with the
//     Content-Length of what was decoded.
//
// Only admitted requests are buffered: a rejection never reads the body. The
// memory held is at most max_body_bytes per request in flight, which the
// bulkhead pools bound.
func (s *Server) bufferRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			next.ServeHTTP(w, r)
			return
		}
		// A fresh buffer per request: the proxy's transport may still be
		// reading the body after the handler returns (httputil says so), so
		// a pooled buffer could be overwritten under it.
		buf := bytes.NewBuffer(make([]byte, 0, min(max(r.ContentLength, 0)+bytes.MinRead, 1<<20)))
		if _, err := buf.ReadFrom(r.Body); err != nil {
			// Never reached the upstream: release without learning.
			if d, ok := admission.FromContext(r.Context()); ok {
				d.Lease().Release()
			}
			id := w.Header().Get(admission.HeaderRequestID)
			var mbe *http.MaxBytesError
			w.Header().Set("Connection", "close")
			if errors.As(err, &mbe) {
				admission.WriteReason(w, admission.ReasonBodyTooLarge, 0, id, "")
				return
			}
			if r.Context().Err() != nil {
				w.WriteHeader(admission.StatusClientClosedRequest)
				return
			}
			admission.WriteReason(w, admission.ReasonMalformedBody, 0, id, err.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(buf.Bytes()))
		r.ContentLength = int64(buf.Len())
		r.TransferEncoding = nil
		r.Header.Set("Content-Length", strconv.Itoa(buf.Len()))
		next.ServeHTTP(w, r)
	})
}
