package gateway

import (
	"net/http"
	"time"
)

// progressWriter gives every write of a response to the client idle to
// complete (server.write_idle_timeout): the connection's write deadline is
// moved forward before each write, header or flush. A client that stops
// reading makes a write block until the deadline, the write fails, the
// proxy gives up the response, and the request's seat, slot and upstream
// connection are released. A response that keeps moving may take as long
// as it needs, which a whole-response http.Server.WriteTimeout would not
// allow.
//
// Moving a deadline is a runtime timer update (a lock and a heap
// operation, ~3% of a 429's CPU for the three a small response made), so a
// write moves it only when the last move is more than idle/16 old: each
// write still has at least 15/16 of idle to complete, and a small answer
// (a rejection, or a response written within idle/16 of the request) pays
// for one move, at the start.
type progressWriter struct {
	http.ResponseWriter
	rc    http.ResponseController // a value: one allocation per request fewer
	idle  time.Duration
	moved time.Time // when the deadline was last moved
}

func newProgressWriter(w http.ResponseWriter, idle time.Duration) *progressWriter {
	p := &progressWriter{ResponseWriter: w, rc: *http.NewResponseController(w), idle: idle}
	p.move(time.Now()) // also covers a write the server makes itself (100 Continue)
	return p
}

// move sets the write deadline idle from now. A writer that cannot set
// deadlines (a test recorder) is left as it is.
func (p *progressWriter) move(now time.Time) {
	p.moved = now
	_ = p.rc.SetWriteDeadline(now.Add(p.idle))
}

// extend moves the write deadline unless it was moved less than idle/16
// before now. The deadline is the connection's, on the real clock: now is
// time.Now() but in tests.
func (p *progressWriter) extend(now time.Time) {
	if now.Sub(p.moved) > p.idle/16 {
		p.move(now)
	}
}

func (p *progressWriter) WriteHeader(code int) {
	p.extend(time.Now())
	p.ResponseWriter.WriteHeader(code)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	p.extend(time.Now())
	return p.ResponseWriter.Write(b)
}

// Flush flushes through to the connection, for streamed responses.
func (p *progressWriter) Flush() {
	p.extend(time.Now())
	_ = p.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (p *progressWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }
