package gateway

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// sweepingWatcher is a watcher that sweeps every 5 ms and keeps deadlines
// more than 20 ms away.
func sweepingWatcher(t *testing.T) *goneWatcher {
	w, err := newGoneWatcherSweeping(5*time.Millisecond, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.close)
	return w
}

// kept reports whether c's deadline on side is kept for the sweep (and is
// not the connection's own).
func kept(c *edgeConn, side int) bool {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	return c.dl.want[side] != 0
}

// readErr reads from c until an error, at most 5 s, and says how long it
// took.
func readErr(t *testing.T, c net.Conn) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		var b [64]byte
		for {
			if _, err := c.Read(b[:]); err != nil {
				errc <- err
				return
			}
		}
	}()
	select {
	case err := <-errc:
		return err, time.Since(start)
	case <-time.After(5 * time.Second):
		t.Fatal("the read was still blocked 5 s later: its deadline never fired")
		return nil, 0
	}
}

// TestSweptReadDeadlineFires: a read deadline kept for the sweep fails the
// blocked read with os.ErrDeadlineExceeded once it has passed, never
// before. Without the sweep the read blocks on (the test's negative
// control is its 5 s bound).
func TestSweptReadDeadlineFires(t *testing.T) {
	w := sweepingWatcher(t)
	_, c := acceptWatched(t, w)
	const after = 150 * time.Millisecond
	c.SetReadDeadline(time.Now().Add(after))
	if !kept(c, readSide) {
		t.Fatal("a deadline 150 ms away was set on the connection, not kept for the sweep")
	}
	err, took := readErr(t, c)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read failed with %v, want os.ErrDeadlineExceeded", err)
	}
	if took < after-time.Millisecond {
		t.Fatalf("the deadline fired after %v, before its %v", took, after)
	}
}

// TestSweptWriteDeadlineFires: a client that stops reading is cut off by
// a swept write deadline.
func TestSweptWriteDeadlineFires(t *testing.T) {
	w := sweepingWatcher(t)
	_, c := acceptWatched(t, w)
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	if !kept(c, writeSide) {
		t.Fatal("the write deadline was not kept for the sweep")
	}
	errc := make(chan error, 1)
	go func() {
		chunk := make([]byte, 64<<10)
		for {
			if _, err := c.Write(chunk); err != nil {
				errc <- err
				return
			}
		}
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("write failed with %v, want os.ErrDeadlineExceeded", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the write to a client that reads nothing was still blocked 5 s later")
	}
}

// TestMovedDeadlineDoesNotFire: a deadline moved before it passes, or
// cleared after it fired, no longer fails the connection's reads.
func TestMovedDeadlineDoesNotFire(t *testing.T) {
	w := sweepingWatcher(t)
	client, c := acceptWatched(t, w)
	first := time.Now().Add(50 * time.Millisecond)
	c.SetReadDeadline(first)
	c.SetReadDeadline(time.Now().Add(time.Hour)) // moved, as for the next request
	// The client writes once a sweep has run after the first deadline
	// (the watcher's clock, polled): a read blocked until then would have
	// failed had the sweep kept the first deadline.
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		for w.now.Load() <= w.since(first) {
			time.Sleep(time.Millisecond)
		}
		client.Write([]byte("x"))
	}()
	var b [1]byte
	if _, err := c.Read(b[:]); err != nil {
		t.Fatalf("read failed with %v after its deadline was moved an hour on", err)
	}
	closedWithin5s(t, swept, "no sweep ran after the first deadline")

	// Fired, then cleared: the connection reads again.
	c.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	if err, _ := readErr(t, c); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read failed with %v, want os.ErrDeadlineExceeded", err)
	}
	c.SetReadDeadline(time.Time{})
	client.Write([]byte("y"))
	if _, err := c.Read(b[:]); err != nil || b[0] != 'y' {
		t.Fatalf("read %q, %v after the fired deadline was cleared", b, err)
	}
}

// TestNearDeadlineIsExact: a deadline nearer than the sweep's nearness,
// or in the past, is the connection's own at once.
func TestNearDeadlineIsExact(t *testing.T) {
	w := sweepingWatcher(t)
	_, c := acceptWatched(t, w)
	c.SetReadDeadline(time.Now().Add(-time.Second))
	if kept(c, readSide) {
		t.Fatal("a deadline in the past was kept for the sweep")
	}
	if err, _ := readErr(t, c); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read failed with %v, want os.ErrDeadlineExceeded", err)
	}
}

// TestWallClockDeadlineIsOwn: a deadline without a monotonic reading is
// the connection's own, since the sweep's clock is monotonic.
func TestWallClockDeadlineIsOwn(t *testing.T) {
	w := sweepingWatcher(t)
	_, c := acceptWatched(t, w)
	c.SetReadDeadline(time.Now().Add(time.Hour).Round(0))
	if kept(c, readSide) {
		t.Fatal("a wall-clock deadline was kept for the sweep")
	}
	c.SetReadDeadline(time.Now().Add(time.Hour))
	if !kept(c, readSide) {
		t.Fatal("a monotonic deadline an hour away was not kept for the sweep")
	}
}

// TestLongSweepsStillWatch: sweeps that take longer than the sweep's
// period (here a microsecond, over a hundred connections) still leave the
// watcher reading its events: a client that leaves is told, and close
// stops it. When the next wait was armed from the sweep's start, its
// deadline had passed before the wait, the poller returned at once, and
// the goroutine swept back to back without reading either.
func TestLongSweepsStillWatch(t *testing.T) {
	w, err := newGoneWatcherSweeping(time.Microsecond, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	client, c := acceptWatched(t, w)
	for range 100 {
		_, o := acceptWatched(t, w)
		o.SetReadDeadline(time.Now().Add(time.Hour))
	}
	gone := make(chan struct{})
	w.watch(c, func() { close(gone) })
	client.Close()
	closedWithin5s(t, gone, "the client's leaving was not told within 5 s")
	w.close()
	closedWithin5s(t, w.done, "the watcher's goroutine still ran 5 s after close")
}

// TestClosedWatcherHandsDeadlinesBack: when the watcher stops, a kept
// deadline becomes the connection's own and still fires.
func TestClosedWatcherHandsDeadlinesBack(t *testing.T) {
	w, err := newGoneWatcherSweeping(time.Hour, 20*time.Millisecond) // never sweeps
	if err != nil {
		t.Fatal(err)
	}
	_, c := acceptWatched(t, w)
	c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if !kept(c, readSide) {
		t.Fatal("the deadline was not kept for the sweep")
	}
	w.close()
	<-w.done
	if kept(c, readSide) {
		t.Fatal("the deadline is still kept after the watcher stopped")
	}
	if err, _ := readErr(t, c); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read failed with %v, want os.ErrDeadlineExceeded", err)
	}
	c.SetReadDeadline(time.Now().Add(time.Hour))
	if kept(c, readSide) {
		t.Fatal("a deadline set after the watcher stopped was kept for a sweep that no longer runs")
	}
}

// BenchmarkEdgeConnDeadline: the three deadline moves fasthttp makes per
// request (idle, read, write), on an edgeConn the watcher sweeps and on
// the plain TCP connection under it.
func BenchmarkEdgeConnDeadline(b *testing.B) {
	w, err := newGoneWatcher()
	if err != nil {
		b.Fatal(err)
	}
	defer w.close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	ac, err := edgeListener{ln, w}.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer ac.Close()
	c := ac.(*edgeConn)
	for _, bc := range []struct {
		name string
		conn net.Conn
	}{{"swept", c}, {"tcp", c.Conn}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				now := time.Now()
				bc.conn.SetReadDeadline(now.Add(120 * time.Second))
				bc.conn.SetReadDeadline(now.Add(5 * time.Second))
				bc.conn.SetWriteDeadline(now.Add(30 * time.Second))
			}
		})
	}
}
