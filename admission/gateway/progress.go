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
type progressWriter struct {
	http.ResponseWriter
	rc   http.ResponseController // a value: one allocation per request fewer
	idle time.Duration
}

func newProgressWriter(w http.ResponseWriter, idle time.Duration) *progressWriter {
	p := &progressWriter{ResponseWriter: w, rc: *http.NewResponseController(w), idle: idle}
	p.extend() // also covers a write the server makes itself (100 Continue)
	return p
}

// extend moves the write deadline idle from now. A writer that cannot set
// deadlines (a test recorder) is left as it is.
func (p *progressWriter) extend() { _ = p.rc.SetWriteDeadline(time.Now().Add(p.idle)) }

func (p *progressWriter) WriteHeader(code int) {
	p.extend()
	p.ResponseWriter.WriteHeader(code)
}

func (p *progressWriter) Write(b []byte) (int, error) {
	p.extend()
	return p.ResponseWriter.Write(b)
}

// Flush flushes through to the connection, for streamed responses.
func (p *progressWriter) Flush() {
	p.extend()
	_ = p.rc.Flush()
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (p *progressWriter) Unwrap() http.ResponseWriter { return p.ResponseWriter }
