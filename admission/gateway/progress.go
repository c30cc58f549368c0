package gateway

import (
	"context"
	"net"
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
// operation, a visible share of a 429's CPU: bench/PERF.md), so a
// write moves it only when less than 15/16 of idle is left of it: each
// write still has at least that long. The deadline is the connection's,
// and on an HTTP/1 connection served by HTTPServers (ConnContext) it is
// remembered across the connection's requests, which net/http serves one
// after another: a keep-alive client's rejection or quick response moves
// it at most once per idle/16.
type progressWriter struct {
	http.ResponseWriter
	rc   http.ResponseController // a value: one allocation per request fewer
	idle time.Duration
	// until points at the deadline last set: the connection's (HTTP/1
	// through HTTPServers) or own.
	until *time.Time
	own   time.Time
}

// connDeadline is an HTTP/1 connection's write deadline as last set,
// shared by its requests.
type connDeadline struct{ until time.Time }

type connDeadlineKey struct{}

// withConnDeadline is the public server's ConnContext: a place for the
// connection's write deadline.
func withConnDeadline(ctx context.Context, _ net.Conn) context.Context {
	return context.WithValue(ctx, connDeadlineKey{}, &connDeadline{})
}

func newProgressWriter(w http.ResponseWriter, r *http.Request, idle time.Duration) *progressWriter {
	p := &progressWriter{ResponseWriter: w, rc: *http.NewResponseController(w), idle: idle}
	p.until = &p.own
	// HTTP/2 serves a connection's streams at once: each keeps its own.
	if cd, ok := r.Context().Value(connDeadlineKey{}).(*connDeadline); ok && r.ProtoMajor == 1 {
		p.until = &cd.until
	}
	p.extend(time.Now()) // also covers a write the server makes itself (100 Continue)
	return p
}

// extend moves the write deadline to idle from now unless at least 15/16
// of idle is left of it. The deadline is the connection's, on the real
// clock: now is time.Now() but in tests. A writer that cannot set
// deadlines (a test recorder) is left as it is.
func (p *progressWriter) extend(now time.Time) {
	if p.until.Sub(now) >= p.idle-p.idle/16 {
		return
	}
	*p.until = now.Add(p.idle)
	_ = p.rc.SetWriteDeadline(*p.until)
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
