package gateway

import (
	"errors"
	"net"
	"sync"
	"syscall"
)

// goneWatcher tells the fasthttp edge when a client leaves. fasthttp runs
// a request's handler on its connection's goroutine and reads nothing
// while it runs, so, unlike net/http, it never tells a handler that its
// client left: a request waiting for a seat would keep its place in the
// queue, and its upstream call would run on, for a client long gone,
// under the very overload the queue is for. The watcher keeps the
// connections of the requests being watched in an epoll instance of its
// own, for EPOLLRDHUP (the peer closed its side) and hang-ups and errors
// only: a pipelined next request (plain readability) does not wake it,
// and nothing is read from the socket. One goroutine waits for all of
// them; watching a request costs two epoll_ctl calls.
type goneWatcher struct {
	epfd int
	mu   sync.Mutex
	byFD map[int32]func() // what to call when the connection's peer goes
}

func newGoneWatcher() (*goneWatcher, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	w := &goneWatcher{epfd: fd, byFD: map[int32]func(){}}
	go w.loop()
	return w, nil
}

// close stops the watcher; watch does nothing after it.
func (w *goneWatcher) close() { syscall.Close(w.epfd) }

func (w *goneWatcher) loop() {
	var evs [64]syscall.EpollEvent
	for {
		n, err := syscall.EpollWait(w.epfd, evs[:], -1)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return // closed
		}
		for _, ev := range evs[:n] {
			// gone runs under mu, so that unwatch returns only once it
			// has (it is short: a context's cancel, a connection's close).
			w.mu.Lock()
			if gone := w.byFD[ev.Fd]; gone != nil {
				delete(w.byFD, ev.Fd)
				gone()
			}
			w.mu.Unlock()
		}
	}
}

// watch calls gone (once, from the watcher's goroutine) if c's peer closes
// or resets the connection before unwatch(fd). ok is false, and nothing
// is watched, on a connection that is not TCP.
func (w *goneWatcher) watch(c net.Conn, gone func()) (fd int32, ok bool) {
	tc, isTCP := c.(*net.TCPConn)
	if !isTCP {
		return 0, false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return 0, false
	}
	rc.Control(func(f uintptr) { fd = int32(f) })
	w.mu.Lock()
	w.byFD[fd] = gone
	w.mu.Unlock()
	ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | syscall.EPOLLHUP | syscall.EPOLLERR | syscall.EPOLLONESHOT, Fd: fd}
	if err := syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev); err != nil {
		w.mu.Lock()
		delete(w.byFD, fd)
		w.mu.Unlock()
		return 0, false
	}
	return fd, true
}

// unwatch stops watching fd; gone is not running, and is not called, once
// it returns.
func (w *goneWatcher) unwatch(fd int32) {
	w.mu.Lock()
	delete(w.byFD, fd)
	w.mu.Unlock()
	syscall.EpollCtl(w.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil)
}
