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
