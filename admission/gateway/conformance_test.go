package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// The conformance suite: each edge behaviour, run on every engine. A check
// returns an error rather than failing the test, so that a behaviour an
// engine is known not to have yet (knownGaps) is checked too: the check
// must still fail there, and the day it passes the gap must be struck
// from the list. An engine that differs from the reference anywhere else
// fails the suite.

// engines are every engine the public listener may run on.
var engines = []Engine{EngineNetHTTP, EngineFast}

// knownGaps are the behaviours an engine does not have yet, each with
// why. The reference engine has none.
var knownGaps = map[Engine]map[string]string{
	EngineFast: {
		// fasthttp's server waits for the first byte of a request's
		// body, and answers Expect: 100-continue, before it calls any
		// handler; its API does not let a handler change either.
		"a refused request with an unsent body is answered at once": "fasthttp waits for a body's first byte before it calls the handler",
		"no 100 Continue before admission":                          "fasthttp sends 100 Continue before it calls the handler",
	},
}

// conformanceCheck is one edge behaviour: the config it needs, and the
// check against a gateway serving it at base.
type conformanceCheck struct {
	name   string
	mutate func(*Config)
	// upstream, when set, replaces the recording upstream's handler;
	// upstreamURL, when set, starts another upstream and returns its URL.
	upstream    func(w http.ResponseWriter, r *http.Request)
	upstreamURL func(t *testing.T) string
	check       func(base string, up *recorder) error
	// checkServer, when set, is the check instead, given the server too.
	checkServer func(base string, up *recorder, s *Server) error
}

func TestConformance(t *testing.T) {
	if os.Getenv("FAIRGATE_TEST_ENGINE") != "" {
		t.Skip("the suite runs every engine itself")
	}
	for _, engine := range engines {
		for _, c := range conformanceChecks {
			t.Run(string(engine)+"/"+c.name, func(t *testing.T) {
				base, up, srv := startGateway(t, func(cfg *Config) {
					cfg.Server.Engine = engine
					if c.mutate != nil {
						c.mutate(cfg)
					}
					if c.upstreamURL != nil {
						cfg.Upstream = c.upstreamURL(t)
					}
				}, Options{})
				up.handler = c.upstream
				var err error
				if c.checkServer != nil {
					err = c.checkServer(base, up, srv)
				} else {
					err = c.check(base, up)
				}
				why, gap := knownGaps[engine][c.name]
				switch {
				case gap && err == nil:
					t.Errorf("%s now passes %q: strike it from knownGaps", engine, c.name)
				case gap:
					t.Logf("known gap (%s): %v", why, err)
				case err != nil:
					t.Error(err)
				}
			})
		}
	}
}

var conformanceChecks = []conformanceCheck{
	{name: "a refused request with an unsent body is answered at once", check: checkRefusedUnsentBody},
	{name: "no 100 Continue before admission", check: checkNoContinueBeforeAdmission},
	{name: "unadmitted announced bodies are not held",
		mutate: func(c *Config) { c.Server.MaxBodyBytes = 10 << 20 }, check: checkUnadmittedBodiesNotHeld},
	{name: "one upstream attempt after an upstream timeout",
		mutate:   func(c *Config) { c.Server.UpstreamTimeout = 200 * time.Millisecond },
		upstream: func(w http.ResponseWriter, r *http.Request) { time.Sleep(time.Second) },
		check:    checkOneAttemptAfterTimeout},
	{name: "a stream outlives upstream_timeout",
		mutate:   func(c *Config) { c.Server.UpstreamTimeout = 300 * time.Millisecond },
		upstream: slowStream,
		check:    checkStreamWhole},
	{name: "an HTTP/1.0 client gets an identity body until close",
		upstream: func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "part one,")
			w.(http.Flusher).Flush() // no Content-Length: the length is unknown
			io.WriteString(w, "part two")
		},
		check: checkHTTP10Client},
	{name: "behind an HTTP/1.0 upstream the client keeps HTTP/1.1", upstreamURL: http10Upstream, check: checkKeepsHTTP11},
	{name: "a client that leaves is not sent again", upstream: untilGone, check: checkGoneNotResent},
	{name: "a client's forwarding fields never reach the upstream", check: checkClientForwarding},
	{name: "Connection cannot take the tenant's fields off", check: checkConnectionDefence},
	{name: "a request's trailers never reach the upstream", check: checkRequestTrailers},
	{name: "an announced body over max_body_bytes is refused before it is read", check: checkBodyOverLimit},
	{name: "every answer is in the RED metrics", upstream: redUpstream, checkServer: checkREDMetrics},
	{name: "a settled route charges what the upstream says it used", mutate: settledRoutes, upstream: settledUpstream, check: checkSettled},
}

func checkRequestTrailers(base string, up *recorder) error {
	for _, announce := range []string{"Trailer: X-Tenant-Id, X-Custom\r\n", ""} {
		resp, err := rawTo(base, "POST /api/v1/users/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo-starter-key\r\n"+
			announce+"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-Tenant-Id: acme\r\nX-Custom: 1\r\n\r\n")
		if err != nil {
			return err
		}
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		r := up.last()
		if r.ContentLength != 5 || len(r.TransferEncoding) > 0 || len(r.Trailer) > 0 {
			return fmt.Errorf("trailers %q: upstream got length %d, coding %q, trailer %v; want 5, none, none",
				announce, r.ContentLength, r.TransferEncoding, r.Trailer)
		}
		if got := r.Header.Get("X-Tenant-Id"); got != "initech" || r.Header.Get("X-Custom") != "" {
			return fmt.Errorf("trailers %q: upstream saw X-Tenant-Id %q, X-Custom %q", announce, got, r.Header.Get("X-Custom"))
		}
	}
	return nil
}

// checkBodyOverLimit: a head announcing more than max_body_bytes (the
// demo's 1 MiB), multipart or not, is answered 413 with one byte of its
// body sent.
func checkBodyOverLimit(base string, _ *recorder) error {
	for _, ct := range []string{"application/octet-stream", "multipart/form-data; boundary=XX"} {
		c, br, err := rawRequest(base, "POST /api/v1/users/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo-pro-key\r\n"+
			"Content-Type: "+ct+"\r\nContent-Length: 4194304\r\n\r\n-")
		if err != nil {
			return err
		}
		resp, err := http.ReadResponse(br, nil)
		c.Close()
		if err != nil {
			return fmt.Errorf("%s, 4 MiB announced: no answer within 5 s: %w", ct, err)
		}
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			return fmt.Errorf("%s, 4 MiB announced: %d, want 413", ct, resp.StatusCode)
		}
	}
	return nil
}

// rawTo sends raw to base and reads one answer.
func rawTo(base, raw string) (*http.Response, error) {
	c, br, err := rawRequest(base, raw)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp, nil
}

func checkClientForwarding(base string, up *recorder) error {
	resp, err := rawTo(base, "GET /api/v1/users/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo-pro-key\r\n"+
		"X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-For: 7.7.7.7\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Proto: https\r\n"+
		"Forwarded: for=8.8.8.8\r\nX-Real-Ip: 9.9.9.9\r\nBaggage: tenant=acme\r\nTraceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n\r\n")
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	h := up.last().Header
	if got := h.Values("X-Forwarded-For"); len(got) != 1 || got[0] != "127.0.0.1" {
		return fmt.Errorf("upstream X-Forwarded-For %q, want only the peer", got)
	}
	if got := h.Values("X-Forwarded-Proto"); len(got) != 1 || got[0] != "http" {
		return fmt.Errorf("upstream X-Forwarded-Proto %q, want only http", got)
	}
	for _, k := range []string{"Forwarded", "X-Real-Ip", "Baggage", "Traceparent"} {
		if v := h.Values(k); len(v) > 0 {
			return fmt.Errorf("the client's %s %q reached the upstream", k, v)
		}
	}
	return nil
}

func checkConnectionDefence(base string, up *recorder) error {
	resp, err := rawTo(base, "GET /api/v1/users/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo-pro-key\r\n"+
		"Connection: X-Tenant-Id, X-Tenant-Tier, X-Request-Id\r\nX-Tenant-Id: acme\r\n\r\n")
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	h := up.last().Header
	if h.Get("X-Tenant-Id") != "globex" || h.Get("X-Tenant-Tier") != "pro" || h.Get("X-Request-Id") != resp.Header.Get("X-Request-Id") {
		return fmt.Errorf("upstream saw tenant %q tier %q request %q, want globex, pro and the answer's ID",
			h.Get("X-Tenant-Id"), h.Get("X-Tenant-Tier"), h.Get("X-Request-Id"))
	}
	return nil
}

// untilGone answers when its request's context ends, with nothing.
func untilGone(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

func checkGoneNotResent(base string, up *recorder) error {
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/v1/users/me", nil)
	req.Header.Set("Authorization", "Bearer demo-enterprise-key")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	// The upstream has the request; then the client leaves.
	for deadline := time.Now().Add(5 * time.Second); up.count() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			cancel()
			return errors.New("the upstream never got the request")
		}
	}
	cancel()
	<-done
	// A re-sent request would come within milliseconds; 500 ms bounds it.
	for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if n := up.count(); n != 1 {
			return fmt.Errorf("the upstream got the request of a client that left %d times, want once", n)
		}
	}
	return nil
}

// rawRequest opens a connection to base, writes raw and returns a reader
// of what comes back; every read is bounded by 5 s.
func rawRequest(base, raw string) (net.Conn, *bufio.Reader, error) {
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		return nil, nil, err
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, bufio.NewReader(c), nil
}

// answeredWithoutBody sends a head announcing n bytes of body, sends none,
// and wants status back while the body is still owed.
func answeredWithoutBody(base, key string, n, status int) error {
	auth := ""
	if key != "" {
		auth = "Authorization: Bearer " + key + "\r\n"
	}
	c, br, err := rawRequest(base, fmt.Sprintf("POST /api/v1/users/me HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n", auth, n))
	if err != nil {
		return err
	}
	defer c.Close()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return fmt.Errorf("key %q, %d bytes announced and none sent: no answer within 5 s: %w", key, n, err)
	}
	resp.Body.Close()
	if resp.StatusCode != status {
		return fmt.Errorf("key %q, %d bytes announced and none sent: status %d, want %d", key, n, resp.StatusCode, status)
	}
	return nil
}

func checkRefusedUnsentBody(base string, up *recorder) error {
	for _, n := range []int{100, 500_000} {
		if err := answeredWithoutBody(base, "", n, http.StatusUnauthorized); err != nil {
			return err
		}
	}
	// The starter tenant's bucket, emptied by bodiless requests.
	for range 100 {
		if r, err := http.NewRequest("GET", base+"/api/v1/search", nil); err == nil {
			r.Header.Set("Authorization", "Bearer demo-starter-key")
			if resp, err := http.DefaultClient.Do(r); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusTooManyRequests {
					break
				}
			}
		}
	}
	if err := answeredWithoutBody(base, "demo-starter-key", 500_000, http.StatusTooManyRequests); err != nil {
		return err
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	for _, r := range up.reqs {
		if r.Method == "POST" { // every POST here was refused
			return errors.New("the upstream saw a refused POST")
		}
	}
	return nil
}

func checkNoContinueBeforeAdmission(base string, _ *recorder) error {
	c, br, err := rawRequest(base, "POST /api/v1/users/me HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n")
	if err != nil {
		return err
	}
	defer c.Close()
	line, err := br.ReadString('\n')
	if err != nil {
		return fmt.Errorf("no answer to an unauthenticated Expect: 100-continue within 5 s: %w", err)
	}
	if !strings.HasPrefix(line, "HTTP/1.1 401") {
		return fmt.Errorf("an unauthenticated Expect: 100-continue got %q first, want 401", strings.TrimSpace(line))
	}
	return nil
}

func checkUnadmittedBodiesNotHeld(base string, _ *recorder) error {
	const conns = 16
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	// Answered or not (an engine that waits for some of the body before
	// the pipeline fails the check above, not this one), what counts is
	// what the gateway holds for them meanwhile.
	var wg sync.WaitGroup
	cs := make([]net.Conn, conns)
	for i := range conns {
		c, br, err := rawRequest(base, "POST /api/v1/users/me HTTP/1.1\r\nHost: x\r\nContent-Length: 10485760\r\n\r\nx")
		if err != nil {
			return err
		}
		cs[i] = c
		wg.Go(func() {
			if resp, err := http.ReadResponse(br, nil); err == nil {
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	for _, c := range cs {
		c.Close()
	}
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 32<<20 {
		return fmt.Errorf("%d unauthenticated heads announcing 10 MiB each grew the heap by %d MiB", conns, grew>>20)
	}
	return nil
}

func checkOneAttemptAfterTimeout(base string, up *recorder) error {
	for _, method := range []string{"GET", "PUT"} {
		before := up.count()
		req, _ := http.NewRequest(method, base+"/api/v1/users/me", nil)
		req.Header.Set("Authorization", "Bearer demo-enterprise-key")
		start := time.Now()
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusGatewayTimeout {
			return fmt.Errorf("%s to a slow upstream: %d, want 504", method, resp.StatusCode)
		}
		if n := up.count() - before; n != 1 {
			return fmt.Errorf("%s to an upstream slower than upstream_timeout reached it %d times, want once (504 after %v)",
				method, n, time.Since(start).Round(time.Millisecond))
		}
	}
	return nil
}

// slowStream writes 12 chunks of 1 KiB, 100 ms apart: 1.2 s in all.
func slowStream(w http.ResponseWriter, r *http.Request) {
	chunk := strings.Repeat("x", 1024)
	for range 12 {
		io.WriteString(w, chunk)
		w.(http.Flusher).Flush()
		time.Sleep(100 * time.Millisecond)
	}
}

func checkStreamWhole(base string, _ *recorder) error {
	req, _ := http.NewRequest("GET", base+"/api/v1/users/me", nil)
	req.Header.Set("Authorization", "Bearer demo-enterprise-key")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || len(b) != 12*1024 {
		return fmt.Errorf("a 1.2 s stream behind upstream_timeout 300ms: %d of %d bytes, %v", len(b), 12*1024, err)
	}
	return nil
}

func checkHTTP10Client(base string, _ *recorder) error {
	c, br, err := rawRequest(base, "GET /api/v1/users/me HTTP/1.0\r\nHost: x\r\nAuthorization: Bearer demo-enterprise-key\r\n\r\n")
	if err != nil {
		return err
	}
	defer c.Close()
	raw, err := io.ReadAll(br)
	if err != nil {
		return fmt.Errorf("HTTP/1.0: the response did not end with the connection: %w", err)
	}
	head, body, _ := strings.Cut(string(raw), "\r\n\r\n")
	if strings.Contains(strings.ToLower(head), "transfer-encoding") {
		return fmt.Errorf("HTTP/1.0 client got a transfer coding: %q", head)
	}
	if !strings.HasPrefix(head, "HTTP/1.") || body != "part one,part two" {
		return fmt.Errorf("HTTP/1.0 client got %q", raw)
	}
	return nil
}

// http10Upstream starts an upstream that answers in HTTP/1.0 and closes
// each connection, and returns its URL.
func http10Upstream(t *testing.T) string {
	uln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uln.Close() })
	go func() {
		for {
			c, err := uln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err == nil {
					io.WriteString(c, "HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nhello")
				}
			}()
		}
	}()
	return "http://" + uln.Addr().String()
}

// checkKeepsHTTP11: two requests on one HTTP/1.1 connection, each answered
// in HTTP/1.1 and the connection kept alive.
func checkKeepsHTTP11(base string, _ *recorder) error {
	c, br, err := rawRequest(base, "")
	if err != nil {
		return err
	}
	defer c.Close()
	for i := range 2 {
		io.WriteString(c, "GET /api/v1/users/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo-enterprise-key\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return fmt.Errorf("request %d on one connection: %w", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.Proto != "HTTP/1.1" || resp.Close || string(b) != "hello" {
			return fmt.Errorf("request %d: %s close=%v %q, want HTTP/1.1 kept alive with the upstream's body", i, resp.Proto, resp.Close, b)
		}
	}
	return nil
}
