package gateway

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
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

// TestProgressWriterMovesSeldom: a write moves the deadline only when
// less than 15/16 of idle is left of it, so each write has at least that,
// and a small answer moves it once; on an HTTP/1 connection the deadline
// is the connection's, so its next request does not move it again soon.
func TestProgressWriterMovesSeldom(t *testing.T) {
	const idle = 16 * time.Second
	w := &deadlineWriter{}
	r := httptest.NewRequest("GET", "/", nil)
	r = r.WithContext(withConnDeadline(r.Context(), nil))
	p := newProgressWriter(w, r, idle)
	t0 := *p.until
	t0 = t0.Add(-idle) // the first move's time
	check := func(p *progressWriter, at time.Duration, want int) {
		t.Helper()
		p.extend(t0.Add(at))
		if len(w.set) != want {
			t.Fatalf("at %v: %d moves, want %d", at, len(w.set), want)
		}
		if last, now := w.set[len(w.set)-1], t0.Add(at); last.Sub(now) < idle*15/16 {
			t.Fatalf("at %v: the write has %v, want at least %v", at, last.Sub(now), idle*15/16)
		}
	}
	for _, step := range []struct {
		at   time.Duration // after the first move
		want int           // moves so far
	}{{0, 1}, {time.Millisecond, 1}, {time.Second, 1}, {time.Second + time.Nanosecond, 2}, {2 * time.Second, 2}, {10 * time.Second, 3}} {
		check(p, step.at, step.want)
	}
	// The connection's next request, soon after: no move.
	p2 := newProgressWriter(w, r, idle)
	if len(w.set) != 3 {
		t.Fatalf("next request on the connection: %d moves, want 3", len(w.set))
	}
	check(p2, 10*time.Second+time.Second, 3)
	check(p2, 10*time.Second+time.Second+time.Nanosecond, 4)
	// HTTP/2: each request its own deadline.
	r2 := r.Clone(r.Context())
	r2.ProtoMajor = 2
	newProgressWriter(w, r2, idle)
	if len(w.set) != 5 {
		t.Fatalf("HTTP/2 request: %d moves, want 5", len(w.set))
	}
}
