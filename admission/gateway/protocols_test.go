package gateway

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/selfsigned"
)

// h2cClient speaks HTTP/2 over cleartext with prior knowledge, as
// curl --http2-prior-knowledge does.
func h2cClient() *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: p}, Timeout: 10 * time.Second}
}

func getWith(t *testing.T, c *http.Client, url, key string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestH2CPriorKnowledge: a client that opens with the HTTP/2 preface is
// served HTTP/2 on the same listener as HTTP/1.1, through the pipeline
// (RateLimit fields, the tenant upstream); with server.h2c off it is not.
func TestH2CPriorKnowledge(t *testing.T) {
	for _, engine := range engines {
		t.Run(string(engine), func(t *testing.T) { testH2C(t, engine) })
	}
}

func testH2C(t *testing.T, engine Engine) {
	base, up, _ := startGateway(t, func(c *Config) { c.Server.Engine = engine }, Options{})
	resp := getWith(t, h2cClient(), base+"/api/v1/users/me", "demo-pro-key")
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
		t.Fatalf("h2c: %s %d, want HTTP/2 200", resp.Proto, resp.StatusCode)
	}
	if resp.Header.Get("RateLimit") == "" || resp.Header.Get("RateLimit-Policy") == "" {
		t.Fatalf("h2c answer lacks the RateLimit fields: %v", resp.Header)
	}
	if got := up.last().Header.Get("X-Tenant-Id"); got != "globex" {
		t.Fatalf("upstream saw tenant %q, want globex", got)
	}
	if r := getWith(t, http.DefaultClient, base+"/api/v1/users/me", "demo-pro-key"); r.ProtoMajor != 1 {
		t.Fatalf("HTTP/1.1 client got %s", r.Proto)
	}

	off, _, _ := startGateway(t, func(c *Config) { c.Server.Engine = engine; c.Server.H2C = new(false) }, Options{})
	req, _ := http.NewRequest("GET", off+"/api/v1/users/me", nil)
	if resp, err := h2cClient().Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("h2c off: got %s %d, want the connection refused", resp.Proto, resp.StatusCode)
	}
}

// writeCert writes a new self-signed certificate for 127.0.0.1 with the
// given serial number to dir's cert.pem and key.pem, and returns its pool.
func writeCert(t *testing.T, dir string, serial int64) *x509.CertPool {
	t.Helper()
	_, _, cert, err := selfsigned.Write(dir, serial)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

// TestTLSServesHTTP2AndReloads: over TLS, ALPN chooses HTTP/2 or HTTP/1.1;
// a certificate replaced on disk is served to new connections without a
// restart, and a connection opened before keeps working.
func TestTLSServesHTTP2AndReloads(t *testing.T) {
	for _, engine := range engines {
		t.Run(string(engine), func(t *testing.T) { testTLS(t, engine) })
	}
}

func testTLS(t *testing.T, engine Engine) {
	dir := t.TempDir()
	pool1 := writeCert(t, dir, 1)
	base, _, _ := startGateway(t, func(c *Config) {
		c.Server.Engine = engine
		c.Server.TLS = &TLSConfig{CertFile: filepath.Join(dir, "cert.pem"), KeyFile: filepath.Join(dir, "key.pem")}
	}, Options{})
	url := "https" + base[len("http"):] + "/api/v1/users/me"
	client := func(pool *x509.CertPool, h2 bool) *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	old := client(pool1, true)
	if r := getWith(t, old, url, "demo-pro-key"); r.ProtoMajor != 2 || r.StatusCode != 200 || r.Header.Get("RateLimit") == "" {
		t.Fatalf("TLS h2: %s %d %v, want HTTP/2 200 with RateLimit", r.Proto, r.StatusCode, r.Header)
	}
	if r := getWith(t, client(pool1, false), url, "demo-pro-key"); r.ProtoMajor != 1 || r.StatusCode != 200 {
		t.Fatalf("TLS http/1.1: %s %d", r.Proto, r.StatusCode)
	}

	pool2 := writeCert(t, dir, 2)
	fresh := client(pool2, true)
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", "Bearer demo-pro-key")
		resp, err := fresh.Do(req)
		if err == nil {
			resp.Body.Close()
			if got := resp.TLS.PeerCertificates[0].SerialNumber.Int64(); got != 2 {
				t.Fatalf("serial %d, want 2", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new certificate was never served: %v", err)
		}
		fresh.CloseIdleConnections() // a failed handshake: a new connection next time
		time.Sleep(100 * time.Millisecond)
	}
	if r := getWith(t, old, url, "demo-pro-key"); r.StatusCode != 200 {
		t.Fatalf("the connection opened before the reload: %d", r.StatusCode)
	}
}

// TestTrustedProxies: behind a trusted load balancer the client is the
// rightmost untrusted X-Forwarded-For hop, for the unauthenticated bucket
// and for the upstream; from an untrusted peer the header is ignored.
func TestTrustedProxies(t *testing.T) {
	tp := trustedProxies{prefix("127.0.0.0/8"), prefix("::ffff:10.0.0.0/104")} // the second is 10.0.0.0/8
	for _, tc := range []struct {
		peer string
		xff  []string
		want string
		via  bool
	}{
		{"127.0.0.1:5000", nil, "127.0.0.1:5000", true},
		{"127.0.0.1:5000", []string{"203.0.113.9"}, "203.0.113.9:0", true},
		{"127.0.0.1:5000", []string{"198.51.100.1, 203.0.113.9, 10.1.2.3"}, "203.0.113.9:0", true},
		{"127.0.0.1:5000", []string{"198.51.100.1", "203.0.113.9", "10.1.2.3"}, "203.0.113.9:0", true},
		{"127.0.0.1:5000", []string{"10.9.9.9, 10.1.2.3"}, "10.9.9.9:0", true},
		{"127.0.0.1:5000", []string{"198.51.100.1, junk, 10.1.2.3"}, "10.1.2.3:0", true},
		{"127.0.0.1:5000", []string{"2001:db8::5"}, "[2001:db8::5]:0", true},
		{"192.0.2.1:5000", []string{"203.0.113.9"}, "192.0.2.1:5000", false},
	} {
		got, via := tp.clientOf(tc.peer, tc.xff)
		if got != tc.want || via != tc.via {
			t.Errorf("clientOf(%q, %q) = %q, %v; want %q, %v", tc.peer, tc.xff, got, via, tc.want, tc.via)
		}
	}

	for _, engine := range []Engine{EngineNetHTTP, EngineFast} {
		t.Run(string(engine), func(t *testing.T) {
			base, up, _ := startGateway(t, func(c *Config) {
				c.Server.Engine = engine
				c.Server.TrustedProxies = []string{"127.0.0.1"}
			}, Options{})
			// Failed keys from one client behind the proxy exhaust that
			// client's bucket only.
			var last int
			for range 40 {
				last = do(t, "GET", base+"/api/v1/users/me", "wrong", map[string]string{"X-Forwarded-For": "203.0.113.9"}).status
				if last == 429 {
					break
				}
			}
			if last != 429 {
				t.Fatalf("the client behind the proxy was never limited (last %d)", last)
			}
			if r := do(t, "GET", base+"/api/v1/users/me", "wrong", map[string]string{"X-Forwarded-For": "198.51.100.7"}); r.status != 401 {
				t.Fatalf("another client behind the same proxy: %d, want 401 (its own bucket)", r.status)
			}
			r := do(t, "GET", base+"/api/v1/users/me", "demo-pro-key", map[string]string{"X-Forwarded-For": "203.0.113.9", "X-Forwarded-Proto": "https"})
			if r.status != 200 {
				t.Fatalf("status %d", r.status)
			}
			h := up.last().Header
			if got := h.Get("X-Forwarded-For"); got != "203.0.113.9, 127.0.0.1" {
				t.Errorf("upstream X-Forwarded-For %q, want the chain and the proxy", got)
			}
			if got := h.Get("X-Forwarded-Proto"); got != "https" {
				t.Errorf("upstream X-Forwarded-Proto %q, want the trusted proxy's https", got)
			}
		})
	}
}

func prefix(s string) netip.Prefix {
	ps, err := parseTrustedProxies([]string{s})
	if err != nil {
		panic(err)
	}
	return ps[0]
}

// TestProxyProtocol: behind server.proxy_protocol the client is the one
// the PROXY header names, and a connection without a header is closed
// unserved.
func TestProxyProtocol(t *testing.T) {
	for _, engine := range engines {
		t.Run(string(engine), func(t *testing.T) { testProxyProtocol(t, engine) })
	}
}

func testProxyProtocol(t *testing.T, engine Engine) {
	base, up, _ := startGateway(t, func(c *Config) {
		c.Server.Engine = engine
		c.Server.ProxyProtocol = true
	}, Options{})
	addr := base[len("http://"):]
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "PROXY TCP4 203.0.113.9 127.0.0.1 40000 80\r\n"+
		"GET /api/v1/users/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo-pro-key\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := up.last().Header.Get("X-Forwarded-For"); got != "203.0.113.9" {
		t.Fatalf("upstream X-Forwarded-For %q, want the PROXY header's client", got)
	}

	bare, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	bare.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(bare, "GET /api/v1/users/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo-pro-key\r\n\r\n")
	if b, err := io.ReadAll(bare); !closedUnserved(b, err) {
		t.Fatalf("a connection without a PROXY header got %q, %v; want it closed unserved", b, err)
	}

	// With trusted proxies, only they may send the header: loopback is
	// not one here.
	only, _, _ := startGateway(t, func(c *Config) {
		c.Server.Engine = engine
		c.Server.ProxyProtocol = true
		c.Server.TrustedProxies = []string{"10.0.0.0/8"}
	}, Options{})
	spoof, err := net.Dial("tcp", only[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer spoof.Close()
	spoof.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(spoof, "PROXY TCP4 10.1.2.3 127.0.0.1 40000 80\r\n"+
		"GET /api/v1/users/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo-pro-key\r\n\r\n")
	if b, err := io.ReadAll(spoof); !closedUnserved(b, err) {
		t.Fatalf("a PROXY header from an untrusted peer got %q, %v; want the connection closed unserved", b, err)
	}
}

// closedUnserved says a connection read to its end (b, err) was closed
// without an answer: nothing came, and it ended or was reset (a close with
// the client's request unread is a reset).
func closedUnserved(b []byte, err error) bool {
	return len(b) == 0 && (err == nil || errors.Is(err, syscall.ECONNRESET))
}
