package gateway

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestStalledReaderReleased (issue 12): without a write deadline, a client
// reading a large response a byte a minute held its seat, slot and
// upstream connection forever. With server.write_idle_timeout each write
// must make progress; a reader that stalls is cut off and what the
// request held comes back.
func TestStalledReaderReleased(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 64<<20)
	base, up, srv := startGateway(t, func(c *Config) { c.Server.WriteIdleTimeout = 200 * time.Millisecond }, Options{})
	up.handler = func(w http.ResponseWriter, r *http.Request) { w.Write(big) }

	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(4096)
	io.WriteString(conn, "GET /api/v1/search HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo-pro-key\r\n\r\n")
	// Read a little, so the response has begun, then stall.
	if _, err := io.ReadFull(conn, make([]byte, 512)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { slots, _ := held(t, srv, "globex"); return slots == 1 })
	waitReleased(t, srv, "globex")
}

// deadlineWriter records the write deadlines set on it.
type deadlineWriter struct {
	http.ResponseWriter
	set []time.Time
}

func (d *deadlineWriter) SetWriteDeadline(t time.Time) error {
	d.set = append(d.set, t)
	return nil
}

// TestProgressWriterMovesSeldom: a write moves the deadline only when the
// last move is more than idle/16 old, so each write has at least 15/16 of
// idle, and a small answer moves it once.
func TestProgressWriterMovesSeldom(t *testing.T) {
	const idle = 16 * time.Second
	w := &deadlineWriter{}
	p := newProgressWriter(w, idle)
	t0 := p.moved
	for _, step := range []struct {
		at   time.Duration // after the first move
		want int           // moves so far
	}{{0, 1}, {time.Millisecond, 1}, {time.Second, 1}, {time.Second + time.Nanosecond, 2}, {2 * time.Second, 2}, {10 * time.Second, 3}} {
		p.extend(t0.Add(step.at))
		if len(w.set) != step.want {
			t.Fatalf("at %v: %d moves, want %d", step.at, len(w.set), step.want)
		}
		if last, now := w.set[len(w.set)-1], t0.Add(step.at); last.Sub(now) < idle*15/16 {
			t.Fatalf("at %v: the write has %v, want at least %v", step.at, last.Sub(now), idle*15/16)
		}
	}
}
