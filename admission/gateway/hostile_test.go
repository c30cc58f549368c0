package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawExchange sends raw bytes on a new connection to the gateway and
// returns the first response (nil when the server closed the connection
// without one) and whether the server closed the connection afterwards.
func rawExchange(t *testing.T, base, raw string) (*http.Response, string, bool) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, "", true
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	// Closed when the next read sees EOF at once.
	conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, err = br.ReadByte()
	closed := err == io.EOF || resp.Close
	return resp, string(body), closed
}

func TestHostileRequests(t *testing.T) {
	base, up, _ := startGateway(t, nil, Options{})
	auth := "Authorization: Bearer demo-enterprise-key\r\n"
	tests := []struct {
		name       string
		raw        string
		wantStatus int
		wantClosed bool
	}{
		{"conflicting Content-Length", "POST /api/v1/search HTTP/1.1\r\nHost: x\r\n" + auth +
			"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400, true},
		{"malformed chunked", "POST /api/v1/search HTTP/1.1\r\nHost: x\r\n" + auth +
			"Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", 400, true},
		{"unknown transfer coding", "POST /api/v1/search HTTP/1.1\r\nHost: x\r\n" + auth +
			"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501, true},
		{"CR in a header value", "GET /api/v1/users/me HTTP/1.1\r\nHost: x\r\n" + auth +
			"X-Evil: a\rb\r\n\r\n", 400, true},
		{"space before colon", "GET /api/v1/users/me HTTP/1.1\r\nHost: x\r\n" + auth +
			"X-Api-Key : demo-pro-key\r\n\r\n", 400, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := up.count()
			resp, body, closed := rawExchange(t, base, tt.raw)
			if resp == nil {
				t.Fatalf("no response")
			}
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("status %d (%q), want %d", resp.StatusCode, body, tt.wantStatus)
			}
			if tt.wantClosed && !closed {
				t.Errorf("connection left open")
			}
			if up.count() != before {
				t.Errorf("the upstream saw the request: %v", up.last())
			}
		})
	}
}

// TestContentLengthAndChunked: Go's server decodes a request carrying both
// headers as chunked (RFC 9112 §6.3) and drops the Content-Length; fairgate
// buffers the body and forwards it with only a Content-Length, so the
// upstream cannot disagree about where the body ends.
func TestContentLengthAndChunked(t *testing.T) {
	base, up, _ := startGateway(t, nil, Options{})
	var gotBody string
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotBody = string(b)
		io.WriteString(w, "ok")
	}
	resp, _, _ := rawExchange(t, base, "POST /api/v1/search HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo-enterprise-key\r\n"+
		"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	if resp == nil || resp.StatusCode != 200 {
		t.Fatalf("response %v", resp)
	}
	got := up.last()
	if len(got.TransferEncoding) != 0 || got.ContentLength != 5 || got.Header.Get("Content-Length") != "5" || gotBody != "hello" {
		t.Fatalf("upstream saw TE %v CL %d %q body %q", got.TransferEncoding, got.ContentLength, got.Header.Get("Content-Length"), gotBody)
	}
}

// TestSlowloris: 200 connections send their headers a byte at a time; the
// read-header timeout closes every one of them, while a normal client is
// served meanwhile.
func TestSlowloris(t *testing.T) {
	if testing.Short() {
		t.Skip("real timeouts")
	}
	base, _, _ := startGateway(t, func(c *Config) { c.Server.ReadHeaderTimeout = 300 * time.Millisecond }, Options{})
	addr := strings.TrimPrefix(base, "http://")
	const n = 200
	closed := make(chan time.Duration, n)
	start := time.Now()
	for range n {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		go func() {
			msg := "GET /api/v1/users/me HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 100)
			for i := 0; i < len(msg); i++ {
				conn.SetWriteDeadline(time.Now().Add(time.Second))
				if _, err := conn.Write([]byte{msg[i]}); err != nil {
					break
				}
				time.Sleep(20 * time.Millisecond) // the attack: one byte every 20 ms, bounded by len(msg)
			}
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			io.Copy(io.Discard, conn) // returns when the server closes
			closed <- time.Since(start)
		}()
	}
	// A normal client is served while the slow ones hang on.
	for range 5 {
		if r := do(t, "GET", base+"/api/v1/users/me", "demo-pro-key", nil); r.status != 200 {
			t.Fatalf("normal client during slowloris: %d", r.status)
		}
	}
	var slowest time.Duration
	for range n {
		d := <-closed
		slowest = max(slowest, d)
	}
	if slowest > 4*time.Second {
		t.Fatalf("a slow connection stayed open %v", slowest)
	}
}

// TestInvalidKeyFlood: thousands of random keys from one address cost a 401
// or 429 each and leave no per-key state: the only state is the one
// per-IP bucket of failed attempts.
func TestInvalidKeyFlood(t *testing.T) {
	base, up, srv := startGateway(t, nil, Options{})
	client := &http.Client{}
	statuses := map[int]int{}
	for i := range 2000 {
		req, _ := http.NewRequest("GET", base+"/api/v1/users/me", nil)
		req.Header.Set("X-API-Key", fmt.Sprintf("guess-%d-%d", i, time.Now().UnixNano()))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses[resp.StatusCode]++
	}
	if statuses[401]+statuses[429] != 2000 || statuses[429] == 0 {
		t.Fatalf("statuses %v, want only 401s then 429s", statuses)
	}
	if up.count() != 0 {
		t.Fatalf("the upstream saw %d requests", up.count())
	}
	if n := srv.Gate().UnauthenticatedBuckets(); n > 1 {
		t.Fatalf("%d buckets for failed attempts from one address, want 1", n)
	}
}

// TestNoProtocolUpgrade: an Upgrade (h2c, WebSocket) is not passed on, so
// no tunnel can carry requests the pipeline never sees; the request is
// served as plain HTTP.
func TestNoProtocolUpgrade(t *testing.T) {
	base, up, _ := startGateway(t, nil, Options{})
	for _, proto := range []string{"h2c", "websocket"} {
		r := do(t, "GET", base+"/api/v1/users/me", "demo-pro-key", map[string]string{
			"Upgrade": proto, "Connection": "Upgrade, HTTP2-Settings", "HTTP2-Settings": "AAMAAABkAAQAAP__",
			"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13"})
		if r.status != 200 {
			t.Fatalf("%s: status %d", proto, r.status)
		}
		got := up.last()
		if got.Header.Get("Upgrade") != "" || got.Header.Get("Http2-Settings") != "" || strings.Contains(strings.ToLower(got.Header.Get("Connection")), "upgrade") {
			t.Fatalf("%s: the upstream was asked to upgrade: %v", proto, got.Header)
		}
	}
}
