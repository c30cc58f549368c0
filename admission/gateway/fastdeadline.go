package gateway

import (
	"math"
	"time"
)

// Deadlines on the fasthttp edge's connections, kept as numbers.
//
// fasthttp moves a connection's deadlines three times a request: the idle
// timeout while it waits for the next request, the read timeout once that
// request's first byte arrives, the write timeout before it answers. Each
// move is a runtime timer update under the poller's lock, a visible share
// of a 429's CPU (bench/PERF.md §12). A deadline of seconds need not
// be exact to the microsecond, so an edgeConn keeps its read and write
// deadlines as numbers (a mutex and two stores), and the watcher's
// goroutine, which already wakes for every connection, sweeps them every
// sweepEvery: a deadline that has passed is then set on the connection
// itself, in the past, which fails its blocked read or write at once with
// os.ErrDeadlineExceeded, as the runtime's timer would have.
//
// A deadline fires up to sweepEvery late, so only those more than
// sweepNear away are kept this way (late by at most 1/16 of their span,
// and at most 2% of the default read_header_timeout);
// a nearer one, or one in the past (a shutdown waking its reader), is set
// on the connection at once, exactly.
const (
	sweepEvery = 100 * time.Millisecond
	sweepNear  = 16 * sweepEvery
)

// edgeDeadlines are an edgeConn's read and write deadlines, guarded by its
// dmu.
type edgeDeadlines struct {
	// swept: the watcher sweeps this connection's deadlines. False on a
	// connection it could not add, and once it has closed: the deadlines
	// are then the connection's own.
	swept bool
	// want is the read [0] and write [1] deadline that the sweep
	// enforces, as goneWatcher.since gives it; 0 is none.
	want [2]int64
	// set says the connection's own deadline is set (near, or swept when
	// it passed); a later deadline must clear it.
	set [2]bool
}

const (
	readSide  = 0
	writeSide = 1
)

func (c *edgeConn) SetReadDeadline(t time.Time) error { return c.setDeadline(readSide, t) }

func (c *edgeConn) SetWriteDeadline(t time.Time) error { return c.setDeadline(writeSide, t) }

func (c *edgeConn) SetDeadline(t time.Time) error {
	if err := c.setDeadline(readSide, t); err != nil {
		return err
	}
	return c.setDeadline(writeSide, t)
}

func (c *edgeConn) setDeadline(side int, t time.Time) error {
	var v int64
	if !t.IsZero() {
		v = max(c.w.since(t), 1) // 0 is none
	}
	c.dmu.Lock()
	defer c.dmu.Unlock()
	d := &c.dl
	// A time without a monotonic reading (not time.Now's, nor one added
	// to it) is wall clock alone, which the sweep's monotonic clock
	// cannot compare with once the wall clock has been stepped: it is
	// the connection's own, as net.Conn would take it.
	if !d.swept || v != 0 && (v-c.w.now.Load() < int64(c.w.near) || t == t.Round(0)) {
		d.want[side], d.set[side] = 0, !t.IsZero()
		return c.own(side, t)
	}
	d.want[side] = v
	if d.set[side] {
		d.set[side] = false
		return c.own(side, time.Time{})
	}
	return nil
}

// own sets the connection's own deadline on side.
func (c *edgeConn) own(side int, t time.Time) error {
	if side == readSide {
		return c.Conn.SetReadDeadline(t)
	}
	return c.Conn.SetWriteDeadline(t)
}

// expire sets each of c's deadlines that has passed by now (w.since) on
// the connection, which fails its blocked read or write.
func (c *edgeConn) expire(now int64) {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	c.handBack(now)
}

// unsweep hands c's deadlines to the connection itself: the watcher stops.
func (c *edgeConn) unsweep() {
	c.dmu.Lock()
	defer c.dmu.Unlock()
	c.dl.swept = false
	c.handBack(math.MaxInt64)
}

// handBack sets each of c's kept deadlines up to upTo on the connection
// itself; c.dmu is held.
func (c *edgeConn) handBack(upTo int64) {
	d := &c.dl
	for side, v := range d.want {
		if v != 0 && v <= upTo {
			d.want[side], d.set[side] = 0, true
			c.own(side, c.w.at(v))
		}
	}
}

// since is t in the watcher's own nanoseconds, on the monotonic clock
// when t has its reading (time.Now and what is added to it do), so that a
// step of the wall clock neither fires every deadline at once nor holds
// them all back. at is its inverse.
func (w *goneWatcher) since(t time.Time) int64 { return int64(t.Sub(w.base)) }

func (w *goneWatcher) at(v int64) time.Time { return w.base.Add(time.Duration(v)) }

// sweep enforces the deadlines that have passed, on every connection the
// watcher has.
func (w *goneWatcher) sweep(now time.Time) {
	n := w.since(now)
	w.now.Store(n)
	w.mu.Lock()
	w.sweeping = w.sweeping[:0]
	for _, c := range w.byID {
		w.sweeping = append(w.sweeping, c)
	}
	w.mu.Unlock()
	for i, c := range w.sweeping {
		c.expire(n)
		w.sweeping[i] = nil
	}
}
