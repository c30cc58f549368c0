package gateway

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
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
type goneWatcher struct {
	// epfd is the epoll instance; file and raw are it in Go's poller.
	epfd int
	file *os.File
	raw  syscall.RawConn
	// wake is a pipe in the epoll set under ID 0 (no connection's): close
	// writes to it, which wakes the goroutine waiting on the epoll fd.
	// done is closed when that goroutine returns.
	wake [2]int
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
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	// Non-blocking and in Go's own poller, so that the goroutine waits
	// for the epoll fd to turn readable as for a socket, holding no thread
	// in epoll_wait: with one P (GOMAXPROCS=1), a thread back from a
	// blocking wait had to win the P back, and re-entering the wait held
	// the P until the runtime took it back, up to milliseconds in which
	// nothing was served.
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	w := &goneWatcher{epfd: fd, file: os.NewFile(uintptr(fd), "fairgate-gone-watcher"), done: make(chan struct{}),
		byID: map[uint64]*edgeConn{}, every: every, near: near, base: time.Now()}
	w.now.Store(w.since(time.Now()))
	if w.raw, err = w.file.SyscallConn(); err != nil {
		w.file.Close()
		return nil, err
	}
	if err := syscall.Pipe2(w.wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		w.file.Close()
		return nil, err
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN} // ID 0
	if err := syscall.EpollCtl(fd, syscall.EPOLL_CTL_ADD, w.wake[0], &ev); err != nil {
		w.release()
		return nil, err
	}
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
		syscall.Write(w.wake[1], []byte{0})
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
	w.release()
}

// release closes the watcher's descriptors.
func (w *goneWatcher) release() {
	w.file.Close()
	syscall.Close(w.wake[0])
	syscall.Close(w.wake[1])
}

func (w *goneWatcher) loop() {
	defer close(w.done)
	defer w.stop()
	var evs [64]syscall.EpollEvent
	last := time.Now()
	for {
		// Wait for events, or for the next sweep: a deadline on the
		// epoll fd, which the poller keeps.
		w.file.SetReadDeadline(last.Add(w.every))
		n, werr := 0, error(nil)
		err := w.raw.Read(func(fd uintptr) bool {
			n, werr = syscall.EpollWait(int(fd), evs[:], 0)
			if werr == syscall.EINTR {
				n, werr = 0, nil
			}
			return n > 0 || werr != nil
		})
		if now := time.Now(); now.Sub(last) >= w.every {
			w.sweep(now)
			// The next wait is armed from the sweep's end: armed from
			// its start, a sweep longer than every would leave a
			// deadline already past, the poller would return at once
			// without calling EpollWait, and the loop would sweep on
			// and on, never reading an event or the wake pipe.
			last = time.Now()
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) || werr != nil {
			return
		}
		for _, ev := range evs[:n] {
			if ev.Fd == 0 && ev.Pad == 0 { // the wake pipe: close ran
				return
			}
			// gone runs under mu, so that unwatch returns only once it
			// has (it is short: a context's cancel, a connection's close).
			w.mu.Lock()
			if c := w.byID[uint64(uint32(ev.Fd))|uint64(uint32(ev.Pad))<<32]; c != nil && !c.gone {
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
	tc, isTCP := c.Conn.(*net.TCPConn)
	if !isTCP {
		return
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return
	}
	var fd int
	if rc.Control(func(f uintptr) { fd = int(f) }) != nil {
		return
	}
	// Under mu, so that the epoll fd is not closed (and its number
	// reused) under the epoll_ctl.
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	w.next++
	ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | syscall.EPOLLHUP | syscall.EPOLLERR | epollET,
		Fd: int32(uint32(w.next)), Pad: int32(uint32(w.next >> 32))}
	if syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_ADD, fd, &ev) != nil {
		return
	}
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

// epollET is syscall.EPOLLET as the uint32 that EpollEvent.Events is
// (syscall spells it as a negative int).
const epollET = 1 << 31

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
