package gateway

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
)

// handoff sorts the public listener's connections between two servers
// when the engine serves HTTP/1.x only (fasthttp): a connection whose TLS
// handshake chose "h2", or that opens with the HTTP/2 preface in the clear
// (h2c), goes to net/http's server, on the same request path; every other
// goes to the engine. The sorting (PROXY header, handshake, the preface's
// first bytes) runs on the connection's own goroutine, within
// read_header_timeout, so a peer that sends nothing holds no accept loop.
type handoff struct {
	ln       net.Listener
	tc       *tls.Config // nil: cleartext
	h2c      bool
	timeout  time.Duration
	http1    *connQueue
	http2    *connQueue
	stopOnce sync.Once
}

// h2Preface is how an HTTP/2 connection in the clear begins (RFC 9113
// §3.4); no HTTP/1 request line starts with its first bytes.
var h2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

func newHandoff(ln net.Listener, tc *tls.Config, h2c bool, timeout time.Duration) *handoff {
	h := &handoff{ln: ln, tc: tc, h2c: h2c, timeout: timeout}
	// Either server closing its listener (a shutdown) stops the handoff.
	h.http1, h.http2 = newConnQueue(ln.Addr(), h.stop), newConnQueue(ln.Addr(), h.stop)
	go h.run()
	return h
}

// run accepts until the listener closes, then closes both queues.
func (h *handoff) run() {
	defer h.stop()
	for {
		c, err := h.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			h.http1.fail(err)
			h.http2.fail(err)
			return
		}
		go h.sort(c)
	}
}

// stop closes the listener; the queues then fail their Accepts.
func (h *handoff) stop() { h.stopOnce.Do(func() { h.ln.Close() }) }

// sort hands c to the server its protocol is for, or closes it.
func (h *handoff) sort(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(h.timeout))
	if h.tc != nil {
		tc := tls.Server(c, h.tc)
		if err := tc.Handshake(); err != nil {
			c.Close()
			return
		}
		tc.SetReadDeadline(time.Time{})
		if tc.ConnectionState().NegotiatedProtocol == "h2" {
			h.http2.put(tc)
		} else {
			h.http1.put(tc)
		}
		return
	}
	if !h.h2c {
		c.SetReadDeadline(time.Time{})
		h.http1.put(c)
		return
	}
	// The first three bytes say it: "PRI" is the preface, and never an
	// HTTP/1 method a client sends (net/http's server answers it as the
	// preface too).
	br := bufio.NewReaderSize(c, 64)
	first, err := br.Peek(3)
	c.SetReadDeadline(time.Time{})
	if err != nil {
		c.Close()
		return
	}
	pc := &peekedConn{Conn: c, r: br}
	if bytes.Equal(first, h2Preface[:3]) {
		h.http2.put(pc)
	} else {
		h.http1.put(pc)
	}
}

// peekedConn is a connection whose first bytes were read to sort it: r
// gives them back first.
type peekedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// NetConn is the connection under c, for the gone watcher.
func (c *peekedConn) NetConn() net.Conn { return c.Conn }

// connQueue is a net.Listener whose connections come from handoff.
type connQueue struct {
	addr    net.Addr
	conns   chan net.Conn
	onClose func()
	mu      sync.Mutex
	err     error
	closed  chan struct{}
}

func newConnQueue(addr net.Addr, onClose func()) *connQueue {
	return &connQueue{addr: addr, conns: make(chan net.Conn), closed: make(chan struct{}), onClose: onClose}
}

// put hands c to the queue's server, or closes it if the queue is closed.
func (q *connQueue) put(c net.Conn) {
	select {
	case q.conns <- c:
	case <-q.closed:
		c.Close()
	}
}

// fail closes the queue with err, which Accept returns from then on.
func (q *connQueue) fail(err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err == nil {
		q.err = err
		close(q.closed)
	}
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.conns:
		return c, nil
	case <-q.closed:
		q.mu.Lock()
		defer q.mu.Unlock()
		return nil, q.err
	}
}

func (q *connQueue) Close() error {
	q.fail(net.ErrClosed)
	q.onClose()
	return nil
}

func (q *connQueue) Addr() net.Addr { return q.addr }

// tcpOf is the TCP connection under c (through TLS, the PROXY protocol and
// the handoff's peek), for the gone watcher.
func tcpOf(c net.Conn) (*net.TCPConn, bool) {
	for range 4 {
		if tc, ok := c.(*net.TCPConn); ok {
			return tc, true
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil, false
		}
		c = u.NetConn()
	}
	return nil, false
}
