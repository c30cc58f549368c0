package admission

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
)

// bufferBody reads r's whole body (bounded by whatever limit the caller
// put on r.Body, such as http.MaxBytesReader) before the request is
// proxied, as nginx does by default (proxy_request_buffering). Three things
// follow:
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
// It runs before the bulkhead queue (Request.ReadBody), so memory held is
// at most the body limit per request that passed the cheap layers: those
// holding seats and those queued for one.
func bufferBody(r *http.Request) error {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return nil
	}
	// A fresh buffer per request: the proxy's transport may still be
	// reading the body after the handler returns (httputil says so), so a
	// pooled buffer could be overwritten under it.
	buf := bytes.NewBuffer(make([]byte, 0, min(max(r.ContentLength, 0)+bytes.MinRead, 1<<20)))
	if _, err := buf.ReadFrom(r.Body); err != nil {
		return err
	}
	r.Body = io.NopCloser(bytes.NewReader(buf.Bytes()))
	r.ContentLength = int64(buf.Len())
	r.TransferEncoding = nil
	r.Header.Set("Content-Length", strconv.Itoa(buf.Len()))
	return nil
}

// readBody calls req.ReadBody, when set, and maps its failure to the
// decision: 413 when the body outgrew the limit, the context's error when
// the client went away, 400 otherwise.
func readBody(ctx context.Context, req Request, d *Decision) error {
	var err error
	switch {
	case req.ReadBody != nil:
		err = req.ReadBody()
	case req.bodyOf != nil:
		err = bufferBody(req.bodyOf)
	}
	if err == nil {
		d.bodyRead = true
		return nil
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		d.reject(ReasonBodyTooLarge, 0)
	case ctx.Err() != nil:
		return ctx.Err()
	default:
		d.reject(ReasonMalformedBody, 0)
		d.detail = err.Error()
	}
	return nil
}
