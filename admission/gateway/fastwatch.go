package gateway

import (
	"errors"
	"net"
	"syscall"
	"time"
)

// watchGone calls gone when the peer of c closes the connection or resets
// it, until stop is called; stop waits for the watch to end. fasthttp runs
// a request's handler on its connection's goroutine and reads nothing
// while it runs, so, unlike net/http, it never tells a handler that its
// client left: a request waiting for a seat would keep its place in the
// queue for a client long gone, under the very overload the queue is for.
// The watch peeks at the socket (MSG_PEEK: nothing is consumed) whenever
// it is readable: end of stream or an error is the client gone; data is a
// pipelined next request, and the watch ends there. stop ends it with a
// read deadline in the past, and fasthttp sets its own before its next
// read. On a connection that is not TCP it does nothing.
func watchGone(c net.Conn, gone func()) (stop func()) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return func() {}
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var buf [1]byte
		rc.Read(func(fd uintptr) bool {
			n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
			if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EINTR) {
				return false // not readable yet: park on the poller
			}
			if n == 0 || err != nil {
				gone()
			}
			return true
		})
	}()
	return func() {
		c.SetReadDeadline(time.Now())
		<-done
	}
}
