package gateway

import (
	"bytes"
	"net"
	"sync"
)

// requestIDField is how the request ID appears in a request head the
// HostClient writes.
var requestIDField = []byte("\r\nX-Request-Id: ")

// requestIDLen is the length of the edge's request IDs
// (admission.AppendRequestID: 16 hex digits).
const requestIDLen = 16

// upstreamConns maps a request ID to the upstream connection carrying
// that request, so that the fasthttp edge can end an upstream call a
// client has left.
//
// net/http's transport ends a call whose request's context is done.
// fasthttp's HostClient has no context: a call runs until the upstream
// answers or its timeout, and it picks the connection itself. So each
// upstream connection (trackedConn) notes the request it carries, by the
// X-Request-Id the edge puts on every request it sends, and a request
// whose client has gone closes its connection (abort): the upstream sees
// the call end, as behind the net/http edge.
//
// Only an ID the edge is sending (expect, before the call) binds a
// connection: the scan also sees request bodies, and a body that spells
// the field out must not bind the connection to an ID of its choosing
// (the edge's IDs are random, and unknown to a client before its answer).
// The scan carries the end of each write over to the next, so a field
// split between two writes is found.
type upstreamConns struct {
	mu sync.Mutex
	// byID holds the requests being sent (expect), nil until a
	// connection carries them.
	byID map[string]*trackedConn
}

func newUpstreamConns() *upstreamConns { return &upstreamConns{byID: map[string]*trackedConn{}} }

// wrap returns c noting the requests written on it.
func (u *upstreamConns) wrap(c net.Conn) *trackedConn { return &trackedConn{Conn: c, conns: u} }

// expect says the request id is about to be sent.
func (u *upstreamConns) expect(id string) {
	u.mu.Lock()
	u.byID[id] = nil
	u.mu.Unlock()
}

// abort closes the connection carrying the request id, if any.
func (u *upstreamConns) abort(id string) {
	u.mu.Lock()
	c := u.byID[id]
	if c != nil {
		c.aborted = true
	}
	u.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// done forgets the request id, and returns the connection that carried
// it (nil if none did): a streamed body is read from it after.
func (u *upstreamConns) done(id string) net.Conn {
	u.mu.Lock()
	defer u.mu.Unlock()
	c := u.byID[id]
	delete(u.byID, id)
	if c != nil {
		c.id = ""
		return c
	}
	return nil
}

// mayRetry reports whether the request id, whose call failed on a
// connection that broke before the first byte of its answer, may be sent
// once more: only when that connection had carried an earlier request (an
// idle keep-alive connection the upstream closed as it was reused), and
// the request's client has not left.
func (u *upstreamConns) mayRetry(id string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	c := u.byID[id]
	return c != nil && c.requests > 1 && !c.aborted
}

// trackedConn is an upstream connection that notes the request it carries.
type trackedConn struct {
	net.Conn
	conns *upstreamConns
	// tail is the end of the last write, for a field split between two.
	tail []byte
	// guarded by conns.mu: the request it carries, how many it has
	// carried, and whether abort closed it.
	id       string
	requests int
	aborted  bool
}

func (c *trackedConn) Write(p []byte) (int, error) {
	c.scan(p)
	return c.Conn.Write(p)
}

// scan binds c to each expected request ID that p names, or that the
// previous write's tail and p name together.
func (c *trackedConn) scan(p []byte) {
	const keep = len("\r\nX-Request-Id: ") + requestIDLen
	if len(c.tail) > 0 {
		c.tail = append(c.tail, p[:min(len(p), keep+1)]...)
		c.scanIn(c.tail) // what it finds in p alone, scanIn finds again: bind is idempotent
	}
	c.scanIn(p)
	if len(p) >= keep {
		c.tail = append(c.tail[:0], p[len(p)-keep:]...)
	} else if c.tail = append(c.tail, p...); len(c.tail) > keep {
		c.tail = append(c.tail[:0], c.tail[len(c.tail)-keep:]...)
	}
}

// scanIn binds c to each whole X-Request-Id field in b.
func (c *trackedConn) scanIn(b []byte) {
	for {
		i := bytes.Index(b, requestIDField)
		if i < 0 {
			return
		}
		b = b[i+len(requestIDField):]
		if len(b) > requestIDLen && b[requestIDLen] == '\r' {
			c.bind(string(b[:requestIDLen]))
		}
	}
}

// bind notes that c carries the request id, if the edge is sending it.
func (c *trackedConn) bind(id string) {
	c.conns.mu.Lock()
	defer c.conns.mu.Unlock()
	if cur, ok := c.conns.byID[id]; !ok || cur != nil {
		return // not an ID being sent, or bound already
	}
	if c.id != "" {
		delete(c.conns.byID, c.id)
	}
	c.id = id
	c.requests++
	c.conns.byID[id] = c
}

// Handshake tells fasthttp that the connection is TLS already, when it is
// (dialUpstream made it): the scan must see the request in the clear.
func (c *trackedConn) Handshake() error {
	if h, ok := c.Conn.(interface{ Handshake() error }); ok {
		return h.Handshake()
	}
	return nil
}
