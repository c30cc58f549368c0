package gateway

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// goneWatcher tells the fasthttp edge when a client leaves. fasthttp runs
// a request's handler on its connection's goroutine and reads nothing
// while it runs, so, unlike net/http, it never tells a handler that its
// client left: a request waiting for a seat would keep its place in the
// queue, and its upstream call would run on, for a client long gone,
// under the very overload the queue is for.
//
// Every client connection is in an epoll instance of the watcher's own
// from its accept to its close (edgeListener), edge-triggered, for
// EPOLLRDHUP (the peer closed its side) and hang-ups and errors only: a
// pipelined next request (plain readability) does not wake it, and nothing
// is read from the socket. One goroutine waits for all of them. Watching a
// request is then a field set under a mutex, no system call: the
// connection's one epoll_ctl is paid at its accept, not per request.
//
// The epoll set is Linux's (fastwatch_linux.go); elsewhere
// (fastwatch_other.go) the watcher only sweeps deadlines, and a client
// that leaves is noticed when a write to it fails, as before the watcher.
type goneWatcher struct {
	// p is the set of watched connections, in Go's poller. done is
	// closed when the goroutine returns.
	p    *connPoller
	done chan struct{}
	mu   sync.Mutex
	// closed: close ran, or the goroutine stopped; nothing is added after
	// it (guarded by mu).
	closed bool
	// byID maps each open connection's ID, which its epoll events carry
	// (an ID and not its fd: an event read just before a connection
	// closes must not reach the next connection on the same fd).
	byID map[uint64]*edgeConn
	next uint64
	// The goroutine also sweeps the connections' deadlines (see
	// fastdeadline.go) every `every`; now is the time of its last sweep
	// (since base, see since), and a deadline less than near after it is
	// the connection's own. sweeping is the sweep's list, the goroutine's.
	every, near time.Duration
	base        time.Time
	now         atomic.Int64
	sweeping    []*edgeConn
}

func newGoneWatcher() (*goneWatcher, error) { return newGoneWatcherSweeping(sweepEvery, sweepNear) }

// newGoneWatcherSweeping is newGoneWatcher with the deadline sweep's
// period and nearness (tests shorten them).
func newGoneWatcherSweeping(every, near time.Duration) (*goneWatcher, error) {
	p, err := newConnPoller()
	if err != nil {
		return nil, err
	}
	w := &goneWatcher{p: p, done: make(chan struct{}),
		byID: map[uint64]*edgeConn{}, every: every, near: near, base: time.Now()}
	w.now.Store(w.since(time.Now()))
	go w.loop()
	return w, nil
}

// close stops the watcher: its goroutine returns and its descriptors are
// closed; connections accepted after it are served unwatched.
func (w *goneWatcher) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		w.p.wakeUp()
	}
}

// stop ends the watcher as its goroutine returns, after close or a
// failure of the epoll fd: nothing is added after it, every connection
// gets its deadlines back (edgeConn.unsweep), and the descriptors are
// closed.
func (w *goneWatcher) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for _, c := range w.byID {
		c.unsweep()
	}
	w.p.release()
}

func (w *goneWatcher) loop() {
	defer close(w.done)
	defer w.stop()
	var ids [64]uint64
	last := time.Now()
	for {
		// Wait for events, or for the next sweep.
		n, woken, err := w.p.wait(last.Add(w.every), ids[:])
		if now := time.Now(); now.Sub(last) >= w.every {
			w.sweep(now)
			// The next wait is armed from the sweep's end: armed from
			// its start, a sweep longer than every would leave a
			// deadline already past, the poller would return at once
			// without waiting, and the loop would sweep on and on,
			// never reading an event or the wake-up.
			last = time.Now()
		}
		if err != nil || woken {
			return
		}
		for _, id := range ids[:n] {
			// gone runs under mu, so that unwatch returns only once it
			// has (it is short: a context's cancel, a connection's close).
			w.mu.Lock()
			if c := w.byID[id]; c != nil && !c.gone {
				c.gone = true
				if c.onGone != nil {
					c.onGone()
					c.onGone = nil
				}
			}
			w.mu.Unlock()
		}
	}
}

// add starts watching c, for its life. Watching fails on a connection
// that is not TCP; c is then served as before, its requests unwatched.
func (w *goneWatcher) add(c *edgeConn) {
	tc, isTCP := tcpOf(c.Conn)
	if !isTCP {
		return
	}
	// Under mu, so that the poller is not released under the add.
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || !w.p.add(tc, w.next+1) {
		return
	}
	w.next++
	c.id, c.watched = w.next, true
	c.dl.swept = true // before c is in byID, where the sweep finds it
	w.byID[c.id] = c
}

// forget stops watching c, before it closes (its fd leaves the epoll
// instance with the close).
func (w *goneWatcher) forget(c *edgeConn) {
	w.mu.Lock()
	delete(w.byID, c.id)
	c.onGone = nil
	w.mu.Unlock()
}

// watch calls gone (once, from the watcher's goroutine, or at once if the
// peer has gone already) if c's peer closes or resets the connection
// before unwatch(c). It is false, and nothing is watched, on a
// connection the watcher could not add.
func (w *goneWatcher) watch(c *edgeConn, gone func()) bool {
	if !c.watched {
		return false
	}
	w.mu.Lock()
	if c.gone {
		gone()
	} else {
		c.onGone = gone
	}
	w.mu.Unlock()
	return true
}

// unwatch stops watching c's request; gone is not running, and is not
// called, once it returns.
func (w *goneWatcher) unwatch(c *edgeConn) {
	w.mu.Lock()
	c.onGone = nil
	w.mu.Unlock()
}

// edgeListener hands the fasthttp edge its connections as edgeConns.
type edgeListener struct {
	net.Listener
	w *goneWatcher
}

func (l edgeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return newEdgeConn(c, l.w), nil
}

// edgeConn is a client's connection to the fasthttp edge, with what its
// requests would otherwise work out each time: the peer's address as text,
// and the watch for the peer leaving.
type edgeConn struct {
	net.Conn
	w *goneWatcher
	// remote is the peer's address (ip:port), host its IP.
	remote, host string
	// id is the connection's in the watcher; watched says it is there.
	id      uint64
	watched bool
	// gone and onGone are guarded by w.mu: the peer has left; what to
	// call when it does, set while a request is watched.
	gone   bool
	onGone func()
	// dl are the connection's deadlines (fastdeadline.go), guarded by dmu.
	dmu sync.Mutex
	dl  edgeDeadlines
}

func newEdgeConn(c net.Conn, w *goneWatcher) *edgeConn {
	ec := &edgeConn{Conn: c, w: w, remote: c.RemoteAddr().String()}
	ec.host = hostOf(ec.remote)
	w.add(ec)
	return ec
}

func (c *edgeConn) Close() error {
	if c.watched {
		c.w.forget(c)
	}
	return c.Conn.Close()
}
