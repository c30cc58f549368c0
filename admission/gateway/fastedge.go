package gateway

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairgate/fairgate/admission"
)

// fastEdge serves the gateway on fasthttp (server.engine: fasthttp): the
// public listener on fasthttp's server and the upstream on its
// HostClient, both calling the same admission.Gate as the net/http edge,
// through admission.Gate.Admit. A request goes through what the net/http
// edge does to it, in the same order: its request ID; no protocol
// upgrade; hop-by-hop fields removed (before the pipeline sets
// X-Tenant-Id, so "Connection: X-Tenant-Id" cannot take it off); the
// pipeline; X-Forwarded-* from what fairgate saw; the upstream call under
// the lease; the upstream's RateLimit fields renamed. A client that goes
// away is noticed (goneWatcher) while its request waits for a seat and
// while the upstream works, whose call then ends (upstreamConns), and
// while its response streams (a failed write).
type fastEdge struct {
	s         *Server
	hc        *fasthttp.HostClient
	host      string // the upstream's host[:port]
	conns     *upstreamConns
	watcher   *goneWatcher
	exchanges sync.Pool
}

func newFastEdge(s *Server, cfg Config) (*fastEdge, error) {
	target, _ := url.Parse(cfg.Upstream) // checked by Validate
	watcher, err := newGoneWatcher()
	if err != nil {
		return nil, fmt.Errorf("gateway: fasthttp engine: %w", err)
	}
	e := &fastEdge{s: s, host: target.Host, conns: newUpstreamConns(), watcher: watcher}
	e.hc = &fasthttp.HostClient{
		Addr:                          target.Host,
		IsTLS:                         target.Scheme == "https",
		MaxConns:                      1024,
		ReadTimeout:                   cfg.Server.UpstreamTimeout,
		WriteTimeout:                  cfg.Server.UpstreamTimeout,
		StreamResponseBody:            true,
		NoDefaultUserAgentHeader:      true,
		DisableHeaderNamesNormalizing: true,
		DisablePathNormalizing:        true,
		// One attempt per admitted request: the one retry is of a request
		// whose reused idle connection the upstream had closed, before
		// any byte of the answer (as net/http's transport). Never after a
		// timeout, nor once the client has left.
		MaxIdemponentCallAttempts: 2,
		RetryIfErr: func(req *fasthttp.Request, attempts int, err error) (resetTimeout, retry bool) {
			return false, attempts == 1 && brokenBeforeAnswer(err) && idempotent(req) &&
				e.conns.mayRetry(string(req.Header.Peek(admission.HeaderRequestID)))
		},
		Dial: func(addr string) (net.Conn, error) { return e.dialUpstream(addr, target) },
	}
	e.exchanges.New = func() any { return newFastExchange(watcher, e.conns) }
	return e, nil
}

// dialUpstream dials the upstream at addr, over TLS for an https target
// (here, not in fasthttp: the request tracking must see the request in the
// clear, so it wraps the TLS connection, not the TCP one under it).
func (e *fastEdge) dialUpstream(addr string, target *url.URL) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return nil, err
	}
	if target.Scheme == "https" {
		tc := tls.Client(c, &tls.Config{ServerName: target.Hostname()})
		tc.SetDeadline(time.Now().Add(2 * time.Second))
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, err
		}
		tc.SetDeadline(time.Time{})
		c = tc
	}
	return e.conns.wrap(c), nil
}

// close stops what the edge runs besides its server.
func (e *fastEdge) close() { e.watcher.close() }

// server returns the fasthttp.Server for the public listener, with the
// config's limits.
func (e *fastEdge) server() *fasthttp.Server {
	c := e.s.cfg.Load().Server
	return &fasthttp.Server{
		Handler:      e.serve,
		ErrorHandler: e.malformed,
		// The head must arrive within read_header_timeout (slowloris);
		// once it has, the body gets what is left of read_timeout.
		ReadTimeout: min(c.ReadHeaderTimeout, c.ReadTimeout),
		HeaderReceived: func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
			if h.ContentLength() == 0 {
				return fasthttp.RequestConfig{} // no body to read: no deadline to move
			}
			// A limit of one byte: with StreamRequestBody, fasthttp calls
			// the handler as soon as it has read that much of a body over
			// its limit (its doc says so), where it would read up to 8 KiB
			// first; readBody applies max_body_bytes.
			return fasthttp.RequestConfig{ReadTimeout: max(c.ReadTimeout-c.ReadHeaderTimeout, time.Millisecond),
				MaxRequestBodySize: 1}
		},
		IdleTimeout:        c.IdleTimeout,
		WriteTimeout:       c.WriteIdleTimeout,
		ReadBufferSize:     c.MaxHeaderBytes,
		MaxRequestBodySize: int(min(c.MaxBodyBytes, 1<<31-1)),
		// The body is read by an admitted request only (readBody), not
		// before the handler: fasthttp then holds at most 8 KiB of an
		// announced body before the pipeline runs, not all of it.
		StreamRequestBody: true,
		// Nor is a multipart body parsed (read whole) before the handler.
		DisablePreParseMultipartForm: true,
		NoDefaultServerHeader:        true,
		// Errors are sentinels (malformed matches them), and carry no
		// part of the request.
		SecureErrorLogMessage: true,
		NoDefaultContentType:  true,
		// Nothing reads a request's start time (RequestCtx.Time): no clock
		// read per request for it.
		LazyRequestTime: true,
		CloseOnShutdown: true,
		// fasthttp's own logger writes a malformed request's whole head,
		// its Authorization field included.
		Logger: quietLogger{},
	}
}

// quietLogger drops fasthttp's logs: what matters of them is answered by
// malformed, and they carry requests' credentials.
type quietLogger struct{}

func (quietLogger) Printf(string, ...any) {}

// malformed answers a request fasthttp could not read as net/http's server
// does: 431 for a head over max_header_bytes, 501 for a transfer coding it
// does not know, else 400, in plain text; and a body over max_body_bytes
// gets the contract's 413, as on the net/http edge. The connection is
// closed after it.
func (e *fastEdge) malformed(rc *fasthttp.RequestCtx, err error) {
	rc.SetConnectionClose()
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		var idb [16]byte
		id := string(admission.AppendRequestID(idb[:0]))
		fw := fastAnswer{rc: rc}
		fw.Header()[admission.HeaderRequestID] = []string{id}
		admission.WriteReason(&fw, admission.ReasonBodyTooLarge, 0, id, "")
		return
	}
	status := http.StatusBadRequest
	var small *fasthttp.ErrSmallBuffer
	switch {
	case errors.As(err, &small):
		status = http.StatusRequestHeaderFieldsTooLarge
	case errors.Is(err, fasthttp.ErrUnsupportedTransferEncoding): // SecureErrorLogMessage's sentinel
		status = http.StatusNotImplemented
	}
	rc.Response.Header.SetContentType("text/plain; charset=utf-8")
	rc.SetStatusCode(status)
	rc.SetBodyString(strconv.Itoa(status) + " " + http.StatusText(status))
}

// serve is the fasthttp edge's handler.
func (e *fastEdge) serve(rc *fasthttp.RequestCtx) {
	x := e.exchanges.Get().(*fastExchange)
	x.reset(rc)
	if !e.exchange(rc, x) {
		x.release(&e.exchanges)
	}
}

// exchange serves rc with x. It is true when the upstream's body streams
// to the client after it returns: the body's Close then puts x back.
func (e *fastEdge) exchange(rc *fasthttp.RequestCtx, x *fastExchange) (streams bool) {
	var idb [16]byte
	id := admission.AppendRequestID(idb[:0])
	x.SetAnswerHeader(admission.HeaderRequestID, id)
	reqID := string(id)
	x.reqID = reqID
	x.maxBody = min(e.s.cfg.Load().Server.MaxBodyBytes, math.MaxInt64-1)
	method := methodOf(rc.Method())
	h := &rc.Request.Header
	// No protocol upgrades (WebSocket, h2c), as on the net/http edge,
	// and no hop-by-hop fields.
	remote, host := peerOf(rc)
	fwdFor, fwdProto := host, "http"
	if rc.IsTLS() {
		fwdProto = "https"
	}
	if len(e.s.trusted) > 0 { // before hop-by-hop removal, as the net/http edge reads them
		fwdFor, fwdProto, remote = e.forwarded(h, remote, host, fwdProto)
	}
	removeHopByHop(h)
	x.setCredentials(h)
	var ctx context.Context = &x.ctx
	x.red = e.s.gate.StartRequest()
	defer func() {
		if !streams { // else when the body has streamed (upstreamBody.Close)
			x.red.Answered(rc.Response.StatusCode())
		}
	}()
	// The root span and the access log, as on the net/http edge.
	ctx, rec := e.s.beginRequest(ctx, method, remote, reqID, fastCarrier{h},
		func(tid []byte) { x.SetAnswerHeader(HeaderTraceID, tid) })
	if rec.active() {
		defer func() { rec.end(rc.Response.StatusCode()) }()
	}
	tel := e.s.tel
	// (The writer is made only for the answer: one made per request would
	// be an allocation per request.)
	if cl := int64(rc.Request.Header.ContentLength()); cl > x.maxBody && announcedTooLarge(&fastAnswer{rc: rc}, cl, x.maxBody, reqID) {
		return false
	}
	// The path and the credentials are views of the request's buffers:
	// Admit keeps none of a request's strings, and nothing changes the
	// request before it returns.
	cl := rc.Request.Header.ContentLength()
	req := admission.Request{Method: method, Path: b2s(rc.Path()), Header: x.creds,
		RemoteAddr: remote, ReadBody: x.readBodyFn, BodyUnread: cl > 0 || cl == -1}
	if raw := rc.URI().PathOriginal(); bytes.IndexByte(raw, '%') >= 0 {
		req.RawPath = b2s(raw)
	}
	d, err := e.s.gate.Admit(ctx, req, x, reqID)
	x.red.Decided(&d)
	clear(x.creds) // views that the changes below may overwrite
	x.credVals = [2]string{}
	// The watch runs on through the upstream call (stopped there).
	defer x.stopWatch()
	if err != nil {
		rc.SetStatusCode(admission.StatusClientClosedRequest)
		rc.SetConnectionClose()
		return
	}
	if !d.Allowed {
		return
	}
	lease := d.Lease()
	defer func() {
		if !streams {
			lease.Release()
		}
	}()
	if !lease.StartUpstream(ctx) {
		x.red.Decided(&d) // rejected after all
		fw := fastAnswer{rc: rc}
		admission.WriteReason(&fw, admission.ReasonLimitReached, time.Second, reqID, "")
		return
	}
	h.Set(admission.HeaderRequestID, reqID)
	// Nor a client's own X-Forwarded-* (every line of them: Set replaces
	// only the first), Forwarded, X-Real-Ip, Baggage or trace parent.
	delFields(h, clientForwarding)
	h.Set("X-Forwarded-For", fwdFor)
	h.SetBytesV("X-Forwarded-Host", rc.Host())
	h.Set("X-Forwarded-Proto", fwdProto)
	rc.Request.SetHost(e.host)
	uctx := ctx
	if tel.tracer != nil {
		var usp trace.Span
		uctx, usp = tel.tracer.Start(ctx, admission.SpanUpstream, trace.WithSpanKind(trace.SpanKindClient))
		defer usp.End()
		tel.prop.Inject(uctx, fastCarrier{h})
	}
	up := fasthttp.AcquireResponse()
	e.conns.expect(reqID)
	x.calling.Store(true)
	err = e.hc.Do(&rc.Request, up)
	x.stopWatch()
	upconn := e.conns.done(reqID)
	if err != nil {
		fasthttp.ReleaseResponse(up)
		spanFailed(uctx, err)
		f := e.s.upstreamFailed(ctx, err, reqID)
		f.release(lease) // not a healthy call: the limit learns nothing from it
		f.answer(&fastAnswer{rc: rc}, reqID)
		if f.clientGone {
			rc.SetConnectionClose()
		}
		return
	}
	upstreamStatus(uctx, up.StatusCode())
	lease.AnsweredStatus(up.StatusCode())
	reportFastUsage(lease, &up.Header)
	up.Header.Del("Connection")
	up.Header.Del("Keep-Alive")
	renameFastRateLimit(&up.Header)
	// The upstream's status and fields, then the answer's own again
	// (request and trace IDs, RateLimit), which CopyTo replaced.
	up.Header.CopyTo(&rc.Response.Header)
	// The upstream's protocol version and connection are its own: the
	// client keeps HTTP/1.1 and its keep-alive behind an HTTP/1.0
	// upstream (the server still answers an HTTP/1.0 client in kind).
	rc.Response.Header.SetProtocol(http11)
	rc.Response.Header.ResetConnectionClose()
	x.replay(&rc.Response)
	stream := up.BodyStream()
	if stream == nil {
		rc.Response.SetBody(up.Body())
		fasthttp.ReleaseResponse(up)
		return false
	}
	srv := e.s.cfg.Load().Server
	// The body streams to the client after serve returns: the request
	// keeps its seat and slot, and x, until it has (upstreamBody.Close).
	x.body = upstreamBody{r: stream, up: up, lease: *lease, conn: rc.Conn(), upconn: upconn,
		idle: srv.WriteIdleTimeout, upIdle: max(srv.WriteIdleTimeout, srv.UpstreamTimeout), x: x, pool: &e.exchanges}
	if up.Header.ContentLength() < 0 && !rc.Request.Header.IsHTTP11() {
		x.untilClose(rc)
		return true
	}
	// An unknown length (-2: until the upstream closes) is chunked to the
	// client, whose connection stays open.
	rc.Response.SetBodyStream(&x.body, max(up.Header.ContentLength(), -1))
	return true
}

// reportFastUsage gives lease the usage field of the upstream's answer h
// when its route settles by one: a header at the head, a trailer once the
// body has been read (fasthttp keeps trailers among the header's fields),
// as the net/http engine reads them from the answer's header after the
// proxy returns (admission's usageOf). A field not there yet leaves what
// an earlier read found.
func reportFastUsage(lease *admission.Lease, h *fasthttp.ResponseHeader) {
	if name, _, ok := lease.SettleField(); ok {
		if v := h.Peek(name); len(v) > 0 {
			lease.ReportUsage(string(v))
		}
	}
}

// upstreamBody is an upstream response's body as the client's response
// body stream. Each read means the client took what came before, so it
// moves the write deadline (write_idle_timeout: a client that stops
// reading is cut off, a long download that keeps moving is not). Close,
// which fasthttp calls once the response is written or has failed, gives
// back the upstream connection and the request's lease.
type upstreamBody struct {
	r     io.Reader
	up    *fasthttp.Response
	lease admission.Lease // moved here from the decision
	conn  net.Conn
	// upconn is the upstream connection the body comes from (nil if
	// unknown): its read deadline moves with the client's write deadline,
	// so a body that keeps coming is never cut at upstream_timeout.
	upconn net.Conn
	// idle is write_idle_timeout; upIdle, how long the upstream's body
	// may pause: the longer of it and upstream_timeout.
	idle, upIdle time.Duration
	moved        time.Time
	// x is the exchange the body is part of, which Close puts back in
	// pool.
	x    *fastExchange
	pool *sync.Pool
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	if now := time.Now(); b.idle > 0 && now.Sub(b.moved) > b.idle/16 {
		b.conn.SetWriteDeadline(now.Add(b.idle))
		if b.upconn != nil {
			b.upconn.SetReadDeadline(now.Add(b.upIdle))
		}
		b.moved = now
	}
	return b.r.Read(p)
}

func (b *upstreamBody) Close() error {
	b.x.red.Answered(b.up.StatusCode())
	reportFastUsage(&b.lease, &b.up.Header) // the trailers have come, if the body has
	fasthttp.ReleaseResponse(b.up)
	b.lease.Release()
	x, pool := b.x, b.pool
	*b = upstreamBody{}
	x.release(pool)
	return nil
}
