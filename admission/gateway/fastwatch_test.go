package gateway

import (
	"net"
	"testing"
	"time"
)

func newTestWatcher(t *testing.T) *goneWatcher {
	w, err := newGoneWatcher()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.close)
	return w
}

// closedWithin5s fails t with msg unless ch is closed within 5 s (a bound
// on a wait that should end at once, not a timing).
func closedWithin5s(t *testing.T, ch <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal(msg)
	}
}

// acceptWatched returns both ends of a loopback TCP connection, the
// server's accepted through an edgeListener on w.
func acceptWatched(t *testing.T, w *goneWatcher) (client net.Conn, server *edgeConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c, err := edgeListener{ln, w}.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); c.Close() })
	return client, c.(*edgeConn)
}

// TestGoneWatcherKeepsConnections: a connection is registered once, at
// its accept, and each of its requests is watched in turn: a request
// watched and unwatched is never told of anything; the next one is told
// when the client leaves; one watched after the client has left is told
// at once.
func TestGoneWatcherKeepsConnections(t *testing.T) {
	w := newTestWatcher(t)
	client, c := acceptWatched(t, w)
	if !c.watched {
		t.Fatal("a TCP connection was not added to the watcher")
	}
	if c.remote != client.LocalAddr().String() || c.host != "127.0.0.1" {
		t.Fatalf("peer %q host %q, want %q and 127.0.0.1", c.remote, c.host, client.LocalAddr())
	}

	first := make(chan struct{}, 1)
	if !w.watch(c, func() { first <- struct{}{} }) {
		t.Fatal("watch refused a watched connection")
	}
	w.unwatch(c)

	second := make(chan struct{})
	w.watch(c, func() { close(second) })
	client.Close()
	closedWithin5s(t, second, "the watched request was not told that its client left")
	w.unwatch(c)
	select {
	case <-first:
		t.Fatal("an unwatched request was told")
	default:
	}

	third := make(chan struct{}, 1)
	w.watch(c, func() { third <- struct{}{} })
	select {
	case <-third:
	default:
		t.Fatal("a request watched after its client left was not told at once")
	}
}

// TestGoneWatcherForgetsClosedConnections: a closed connection leaves the
// watcher, and a connection that is not TCP is served unwatched.
func TestGoneWatcherForgetsClosedConnections(t *testing.T) {
	w := newTestWatcher(t)
	_, c := acceptWatched(t, w)
	c.Close()
	w.mu.Lock()
	n := len(w.byID)
	w.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d connections watched after the only one closed", n)
	}

	a, b := net.Pipe()
	defer b.Close()
	p := newEdgeConn(a, w)
	defer p.Close()
	if p.watched || w.watch(p, func() {}) {
		t.Fatal("a pipe was watched")
	}
}

// TestGoneWatcherCloseStopsIt: close wakes the goroutine blocked in
// epoll_wait, which returns (closing the epoll fd alone does not wake
// it), and a connection accepted afterwards is served unwatched.
func TestGoneWatcherCloseStopsIt(t *testing.T) {
	w, err := newGoneWatcher()
	if err != nil {
		t.Fatal(err)
	}
	_, c := acceptWatched(t, w)
	if !c.watched {
		t.Fatal("a TCP connection was not added to the watcher")
	}
	w.close()
	closedWithin5s(t, w.done, "the watcher's goroutine still runs 5 s after close")
	w.close() // twice: nothing
	if _, late := acceptWatched(t, w); late.watched {
		t.Fatal("a connection accepted after close was watched")
	}
}
