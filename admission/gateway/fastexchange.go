package gateway

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/fairgate/fairgate/admission"
)

// fastCarrier is a fasthttp request's header as a propagation carrier.
type fastCarrier struct{ h *fasthttp.RequestHeader }

func (c fastCarrier) Get(key string) string { return string(c.h.Peek(key)) }
func (c fastCarrier) Set(key, v string)     { c.h.Set(key, v) }
func (c fastCarrier) Keys() []string {
	var keys []string
	for k := range c.h.All() {
		keys = append(keys, string(k))
	}
	return keys
}

// fastExchange is one request on the fasthttp edge as the pipeline sees
// it (admission.Exchange); the tracer sees its header as a propagation
// carrier (fastCarrier), and the contract's writer its answer as an
// http.ResponseWriter (fastAnswer).
type fastExchange struct {
	rc    *fasthttp.RequestCtx
	creds http.Header // the credential fields, for the pipeline
	// answer is the answer's own fields (request and trace IDs,
	// RateLimit), kept to set again on the upstream's response.
	answer [][2][]byte
	n      int
	// the disconnect watch (goneWatcher): the client's connection while
	// its request is watched, and what the watch does besides cancelling
	// the request's context once the upstream call runs
	watcher  *goneWatcher
	watching *edgeConn
	ctx      requestCtx // the request's context
	// calling: the upstream call of request reqID runs on one of conns'
	// connections, which the watch closes when the client goes
	calling atomic.Bool
	conns   *upstreamConns
	reqID   string
	// credVals backs creds' values
	credVals [2]string
	// body is the upstream's response body, when it streams
	body upstreamBody
	// maxBody is max_body_bytes for the request; body0 is the exchange's
	// buffer the request body is read into (kept across requests).
	maxBody int64
	body0   []byte
	// bodyRead: readBody read the request's body (a rejection after it
	// need not close the connection).
	bodyRead bool
	// red is the request's record in the RED metrics
	red admission.RequestMetrics
	// readBody and clientGone as func values, made once
	readBodyFn func() error
	goneFn     func()
}

func newFastExchange(w *goneWatcher, conns *upstreamConns) *fastExchange {
	x := &fastExchange{creds: make(http.Header, 2), watcher: w, conns: conns}
	x.readBodyFn, x.goneFn = x.readBody, x.clientGone
	return x
}

func (x *fastExchange) reset(rc *fasthttp.RequestCtx) {
	x.rc = rc
	clear(x.creds)
	x.n = 0
	x.watching = nil
	x.calling.Store(false)
	x.bodyRead = false
}

// setCredentials puts h's credential fields in x.creds, for the pipeline.
// The values are views of h's buffer, not copies: the pipeline reads them
// once, to hash the key, during Admit (which keeps none of a request's
// strings), before anything changes h; exchange clears x.creds after it.
// So the raw key is never copied to the heap either.
func (x *fastExchange) setCredentials(h *fasthttp.RequestHeader) {
	if v := h.Peek("Authorization"); len(v) > 0 {
		x.credVals[0] = b2s(v)
		x.creds["Authorization"] = x.credVals[:1:1]
	}
	if v := h.PeekBytes([]byte("X-Api-Key")); v != nil {
		x.credVals[1] = b2s(v)
		x.creds["X-Api-Key"] = x.credVals[1:2:2]
	}
}

// release ends x's request, cancelling its context as a request's context
// is at the end of its handler, and puts x back in pool.
func (x *fastExchange) release(pool *sync.Pool) {
	x.ctx.reset()
	pool.Put(x)
}

func (x *fastExchange) RequestHeader(key string) string {
	return string(x.rc.Request.Header.Peek(key))
}

func (x *fastExchange) StripRequestHeaders(strip func(name string) bool) {
	var del []string
	for k := range x.rc.Request.Header.All() {
		if strip(b2s(k)) {
			del = append(del, string(k))
		}
	}
	for _, k := range del {
		x.rc.Request.Header.Del(k)
	}
}

func (x *fastExchange) DelRequestHeader(key string)        { x.rc.Request.Header.Del(key) }
func (x *fastExchange) SetRequestHeader(key, value string) { x.rc.Request.Header.Set(key, value) }

func (x *fastExchange) SetAnswerHeader(key string, v []byte) {
	x.rc.Response.Header.SetCanonical(s2b(key), v) // the pipeline's keys are canonical
	if x.n == len(x.answer) {
		x.answer = append(x.answer, [2][]byte{})
	}
	x.answer[x.n][0] = append(x.answer[x.n][0][:0], key...)
	x.answer[x.n][1] = append(x.answer[x.n][1][:0], v...)
	x.n++
}

func (x *fastExchange) Answer(status int, body []byte) {
	x.rc.SetStatusCode(status)
	x.rc.SetBody(body)
	if status == http.StatusBadRequest || status == http.StatusRequestEntityTooLarge {
		x.rc.SetConnectionClose()
	}
}

// replay sets the answer's fields again on resp, the upstream's response.
func (x *fastExchange) replay(resp *fasthttp.Response) {
	for _, kv := range x.answer[:x.n] {
		resp.Header.SetCanonical(kv[0], kv[1])
	}
}

// readBody is the pipeline's ReadBody for the request, called once the
// cheap layers have admitted it: it reads the body, bounded by
// max_body_bytes (an *http.MaxBytesError beyond, which the pipeline
// answers 413), and sets it as the request's, so the upstream gets it
// with a Content-Length, as from the net/http edge (admission's
// bufferBody). Then it starts watching for the client to go away
// (goneWatcher) while the request waits for a seat and, after, for the
// upstream, cancelling the request's context then. x.readBodyFn is it,
// made once per pooled exchange.
func (x *fastExchange) readBody() error {
	if stream := x.rc.RequestBodyStream(); stream != nil {
		// Sized for the announced length, so the read does not grow it
		// twice over; a pooled exchange keeps a small buffer only.
		buf := x.body0[:0]
		if cl := x.rc.Request.Header.ContentLength(); cl > 0 && int64(cl) <= x.maxBody && cl > cap(buf) {
			buf = make([]byte, 0, cl+1)
		}
		b := bytes.NewBuffer(buf)
		n, err := b.ReadFrom(io.LimitReader(stream, x.maxBody+1))
		if err != nil {
			return err
		}
		if n > x.maxBody {
			return &http.MaxBytesError{Limit: x.maxBody}
		}
		dropTrailers(&x.rc.Request.Header)
		x.rc.Request.SetBody(b.Bytes()) // a copy: the buffer is the exchange's
		x.rc.Request.Header.SetContentLength(b.Len())
		if cap(b.Bytes()) <= 64<<10 {
			x.body0 = b.Bytes()[:0]
		}
		x.bodyRead = true
	}
	if c, ok := x.rc.Conn().(*edgeConn); ok && x.watcher.watch(c, x.goneFn) {
		x.watching = c
	}
	return nil
}

// clientGone is what the watch calls when the client has gone.
func (x *fastExchange) clientGone() {
	x.ctx.cancel()
	if x.calling.Load() {
		x.conns.abort(x.reqID)
	}
}

func (x *fastExchange) stopWatch() {
	if x.watching != nil {
		x.watcher.unwatch(x.watching)
		x.watching = nil
	}
}

// fastAnswer is an http.ResponseWriter over a fasthttp response, for the
// contract's answers outside a decision (admission.WriteReason).
type fastAnswer struct {
	rc  *fasthttp.RequestCtx
	hdr http.Header
}

func (w *fastAnswer) Header() http.Header {
	if w.hdr == nil {
		w.hdr = make(http.Header, 4)
	}
	return w.hdr
}

func (w *fastAnswer) WriteHeader(status int) {
	for k, v := range w.hdr {
		for _, s := range v {
			w.rc.Response.Header.Set(k, s)
		}
	}
	w.rc.SetStatusCode(status)
}

func (w *fastAnswer) Write(b []byte) (int, error) {
	w.rc.Response.AppendBody(b)
	return len(b), nil
}

// s2b is s's bytes, for a fasthttp call that only reads them.
func s2b(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// b2s is b as a string, for a call that neither keeps it nor outlives b's
// contents.
func b2s(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// untilClose answers an HTTP/1.0 client a body of unknown length (x.body)
// as HTTP/1.0 frames it: as it comes, until the connection closes.
// fasthttp would chunk it, which HTTP/1.0 has no notion of, so the
// connection is taken over (Hijack) once the handler returns, the head
// written as fasthttp renders it less its transfer coding, and the body
// copied; its Close then releases the request, as after a streamed body.
func (x *fastExchange) untilClose(rc *fasthttp.RequestCtx) {
	h := &rc.Response.Header
	h.Del("Transfer-Encoding")
	h.SetConnectionClose()
	head := append([]byte(nil), h.Header()...)
	idle := x.body.idle
	// fasthttp starts the hijack after the handler, unless the connection
	// fails before: then nothing would release the request. So the
	// handler must have started within write_idle_timeout, or the request
	// is released without it; whichever comes first does, and the other
	// does nothing (state: 0 waiting, 1 copying, 2 released).
	var state atomic.Int32
	t := time.AfterFunc(idle, func() {
		if state.CompareAndSwap(0, 2) {
			x.body.Close()
		}
	})
	rc.HijackSetNoResponse(true)
	rc.Hijack(func(c net.Conn) {
		if !state.CompareAndSwap(0, 1) {
			return
		}
		t.Stop()
		c.SetWriteDeadline(time.Now().Add(idle))
		if _, err := c.Write(head); err == nil {
			io.Copy(c, &x.body)
		}
		x.body.Close()
	})
}

// dropTrailers removes the trailer fields a chunked request body ended
// with (read with it): the upstream gets the body with a Content-Length
// and no trailers, as from the net/http edge, and no field of them
// reaches it past the pipeline's stripping.
func dropTrailers(h *fasthttp.RequestHeader) {
	var names []string
	for _, k := range h.PeekTrailerKeys() {
		names = append(names, string(k))
	}
	h.SetTrailer("") // unannounced: the fields join the header, to be deleted
	for _, k := range names {
		h.Del(k)
	}
}
