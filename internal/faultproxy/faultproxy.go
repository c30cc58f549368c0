// Package faultproxy is a fault-injecting TCP proxy for tests: it listens on
// a loopback port, forwards each connection to a target, and can be told at
// run time to add latency, refuse connections, reset a connection part-way
// through a response, or swallow everything (a black hole).
//
// It is for tests only: one Proxy per test, loopback addresses, bounded
// buffers. Close stops every goroutine it started.
package faultproxy

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// Mode is what the proxy does to traffic.
type Mode uint8

// The modes. A mode applies from the moment Set returns.
const (
	// PassThrough forwards bytes unchanged in both directions.
	PassThrough Mode = iota
	// Latency delays each chunk read from the target by Fault.Latency
	// before it reaches the client (requests are not delayed), like
	// toxiproxy's downstream latency toxic.
	Latency
	// Drop closes new connections as soon as they are accepted, without
	// dialling the target; Set(Drop) also closes the connections already
	// open. A client sees its connection closed before any response.
	Drop
	// Reset forwards Fault.ResetAfter bytes from the target to the client
	// (counted per connection, from its start) and then closes both sides
	// with SO_LINGER 0, so each peer gets a TCP RST.
	Reset
	// BlackHole accepts connections and reads what the client sends, but
	// never dials the target and never answers. On connections already
	// open, bytes in either direction are discarded from then on.
	BlackHole
)

var modeNames = [...]string{"pass-through", "latency", "drop", "reset", "black-hole"}

// String returns the mode's name.
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return "unknown"
}

// Fault is the proxy's current behaviour. The zero value passes traffic
// through.
type Fault struct {
	Mode Mode
	// Latency is the delay per chunk in Latency mode.
	Latency time.Duration
	// ResetAfter is how many bytes of the target's answer a connection
	// gets before the reset, in Reset mode. Zero resets at the first
	// byte the target sends.
	ResetAfter int64
}

// Stats counts connections, for tests that wait for the proxy to see one.
type Stats struct {
	// Accepted is the number of client connections accepted so far.
	Accepted int
	// Active is the number of client connections open now.
	Active int
}

// Proxy is a running fault-injecting proxy. It is safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string
	ctx    context.Context // done when Close is called
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// mu guards the fields below it.
	mu       sync.Mutex
	fault    Fault
	conns    map[*link]struct{}
	accepted int
	closed   bool
}

// link is one proxied connection: the client's side and, unless the mode
// said otherwise at accept, the target's.
type link struct {
	client net.Conn
	sent   int64 // bytes forwarded from target to client; only the target→client pipe touches it

	// mu guards the fields below it.
	mu     sync.Mutex
	target net.Conn
	closed bool
}

// New starts a proxy on 127.0.0.1 with a free port, forwarding to target
// ("host:port").
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{ln: ln, target: target, ctx: ctx, cancel: cancel, conns: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr returns the proxy's address ("127.0.0.1:port").
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Set changes the proxy's behaviour from now on. Set with Mode Drop also
// closes every open connection.
func (p *Proxy) Set(f Fault) {
	p.mu.Lock()
	p.fault = f
	var open []*link
	if f.Mode == Drop {
		for l := range p.conns {
			open = append(open, l)
		}
	}
	p.mu.Unlock()
	for _, l := range open {
		l.close(false)
	}
}

// Stats returns the connection counts.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Accepted: p.accepted, Active: len(p.conns)}
}

// Close stops the listener, closes every connection and waits until every
// goroutine the proxy started has returned. Calling it again does nothing.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	open := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		open = append(open, l)
	}
	p.mu.Unlock()
	p.cancel()
	err := p.ln.Close()
	for _, l := range open {
		l.close(false)
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) current() Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.fault
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return // closed
		}
		l := &link{client: c}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.accepted++
		f := p.fault
		if f.Mode == Drop {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(l, f.Mode)
	}
}

// serve runs one connection until either side closes or the proxy does.
func (p *Proxy) serve(l *link, mode Mode) {
	defer p.wg.Done()
	defer func() {
		l.close(false)
		p.mu.Lock()
		delete(p.conns, l)
		p.mu.Unlock()
	}()
	if mode == BlackHole {
		discard(l.client)
		return
	}
	d := net.Dialer{Timeout: 2 * time.Second}
	t, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		return
	}
	if !l.attach(t) { // closed while dialling
		t.Close()
		return
	}
	done := make(chan struct{}, 2)
	p.wg.Add(2)
	go func() { defer p.wg.Done(); p.upstream(l, t); done <- struct{}{} }()
	go func() { defer p.wg.Done(); p.downstream(l, t); done <- struct{}{} }()
	<-done // one direction ended: end the other
	l.close(false)
	<-done
}

// upstream copies client → target, discarding in BlackHole mode.
func (p *Proxy) upstream(l *link, t net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := l.client.Read(buf)
		if n > 0 && p.current().Mode != BlackHole {
			if _, werr := t.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// downstream copies target → client, applying latency, reset and black hole.
func (p *Proxy) downstream(l *link, t net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := t.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			f := p.current()
			switch f.Mode {
			case BlackHole:
				chunk = nil
			case Latency:
				if !p.sleep(f.Latency) {
					return
				}
			case Reset:
				left := max(f.ResetAfter-l.sent, 0)
				if int64(len(chunk)) >= left {
					if left > 0 {
						l.client.Write(chunk[:left])
					}
					l.close(true)
					return
				}
			}
			if len(chunk) > 0 {
				if _, werr := l.client.Write(chunk); werr != nil {
					return
				}
				l.sent += int64(len(chunk))
			}
		}
		if err != nil {
			return
		}
	}
}

// sleep waits d, or less when the proxy closes; it reports whether the
// whole delay passed.
func (p *Proxy) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.ctx.Done():
		return false
	}
}

// discard reads c until it fails (closed by the client or by Close).
func discard(c net.Conn) {
	buf := make([]byte, 4<<10)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

// attach sets the target's side, unless the link is already closed.
func (l *link) attach(t net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.target = t
	return true
}

// close closes both sides once; with reset, each is closed with SO_LINGER 0
// so that its peer gets a TCP RST instead of a FIN.
func (l *link) close(reset bool) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	t := l.target
	l.mu.Unlock()
	for _, c := range []net.Conn{l.client, t} {
		if c == nil {
			continue
		}
		if tc, ok := c.(*net.TCPConn); ok && reset {
			tc.SetLinger(0)
		}
		c.Close()
	}
}
