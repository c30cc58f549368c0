package gateway

import (
	"bytes"
	"net"
	"sync"
)

// Upstream calls a client has left, on the fasthttp edge.
//
// net/http's transport ends a call whose request's context is done.
// fasthttp's HostClient has no context: a call runs until the upstream
// answers or its timeout, and it picks the connection itself. So each
// upstream connection notes the request it carries, by the X-Request-Id
// the edge puts on every request it sends, and a request whose client has
// gone closes its connection: the upstream sees the call end, as behind
// the net/http edge.

// requestIDField is how the request ID appears in a request head the
// HostClient writes.
var requestIDField = []byte("\r\nX-Request-Id: ")

// upstreamConns maps a request ID to the upstream connection carrying
// that request.
type upstreamConns struct {
	mu   sync.Mutex
	byID map[string]*trackedConn
}

func newUpstreamConns() *upstreamConns { return &upstreamConns{byID: map[string]*trackedConn{}} }

// wrap returns c noting the requests written on it.
func (u *upstreamConns) wrap(c net.Conn) net.Conn { return &trackedConn{Conn: c, conns: u} }

// abort closes the connection carrying the request id, if any.
func (u *upstreamConns) abort(id string) {
	u.mu.Lock()
	c := u.byID[id]
	u.mu.Unlock()
	if c != nil {
		u.mu.Lock()
		c.aborted = true
		u.mu.Unlock()
		c.Close()
	}
}

// done forgets the request id, and returns the connection that carried
// it (nil if none did): a streamed body is read from it after.
func (u *upstreamConns) done(id string) net.Conn {
	u.mu.Lock()
	defer u.mu.Unlock()
	if c := u.byID[id]; c != nil {
		delete(u.byID, id)
		c.id = ""
		return c
	}
	return nil
}

// mayRetry reports whether the request id, whose call failed with a
// connection that closed before the first byte of its answer, may be sent
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
	// guarded by conns.mu: the request it carries, how many it has
	// carried, and whether abort closed it.
	id       string
	requests int
	aborted  bool
}

func (c *trackedConn) Write(p []byte) (int, error) {
	if i := bytes.Index(p, requestIDField); i >= 0 {
		v := p[i+len(requestIDField):]
		if j := bytes.IndexByte(v, '\r'); j > 0 {
			c.conns.mu.Lock()
			if c.id != "" {
				delete(c.conns.byID, c.id)
			}
			c.id = string(v[:j])
			c.requests++
			c.conns.byID[c.id] = c
			c.conns.mu.Unlock()
		}
	}
	return c.Conn.Write(p)
}
