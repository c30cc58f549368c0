package gateway

import (
	"io"
	"net"
	"testing"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"
)

// benchFastEdge is benchConfig on the fasthttp edge, its
// upstream a fasthttp server on an in-memory listener that answers at once
// with a small 200: what the edge's handler costs, apart from the
// connections' reads and writes.
func benchFastEdge(b testing.TB) *fastEdge {
	cfg := benchConfig(b)
	cfg.Server.Engine = EngineFast
	srv, err := New(cfg, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	e, err := newFastEdge(srv, *srv.cfg.Load())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(e.close)
	ln := fasthttputil.NewInmemoryListener()
	up := &fasthttp.Server{Handler: func(rc *fasthttp.RequestCtx) {
		rc.SetContentType("application/json")
		rc.SetBodyString(`{"id":"me"}`)
	}}
	go up.Serve(ln)
	b.Cleanup(func() { ln.Close() })
	e.hc.Dial = func(string) (net.Conn, error) {
		c, err := ln.Dial()
		if err != nil {
			return nil, err
		}
		return e.conns.wrap(c), nil
	}
	return e
}

// benchFastServe sends GET /api/v1/users/me with key through e.serve, each
// goroutine on a RequestCtx of its own as fasthttp's server keeps one per
// connection, and checks the status.
func benchFastServe(b *testing.B, e *fastEdge, key string, want int) {
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		// The client's connection: the edge sets its write deadline and
		// reads its peer's address.
		conn, peer := net.Pipe()
		defer peer.Close()
		rc := new(fasthttp.RequestCtx)
		rc.Init2(newEdgeConn(tcpPeer{conn, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}}, e.watcher), nil, true)
		for pb.Next() {
			rc.Request.Reset()
			rc.Request.SetRequestURI("/api/v1/users/me")
			rc.Request.Header.SetHost("gateway.example")
			rc.Request.Header.Set("Authorization", "Bearer "+key)
			rc.Request.Header.Set("Accept", "application/json")
			rc.Response.Reset()
			e.serve(rc)
			if rc.Response.StatusCode() != want {
				b.Errorf("status %d, want %d: %s", rc.Response.StatusCode(), want, rc.Response.Body())
				return
			}
			rc.Response.BodyWriteTo(io.Discard)
		}
		rc.Response.Reset()
	})
}

// BenchmarkFastEdgeProxied is an admitted request through the fasthttp
// edge's handler: hygiene, pipeline and the upstream call.
func BenchmarkFastEdgeProxied(b *testing.B) {
	benchFastServe(b, benchFastEdge(b), "demo-enterprise-key", fasthttp.StatusOK)
}

// BenchmarkFastEdgeRejected is a request of a tenant over its quota
// through the fasthttp edge's handler: 429.
func BenchmarkFastEdgeRejected(b *testing.B) {
	e := benchFastEdge(b)
	b.StopTimer()
	for range 25 { // spend the burst of 20
		var req fasthttp.Request
		req.SetRequestURI("/api/v1/users/me")
		req.Header.Set("Authorization", "Bearer demo-starter-key")
		var rc fasthttp.RequestCtx
		rc.Init(&req, nil, nil)
		e.serve(&rc)
	}
	b.StartTimer()
	benchFastServe(b, e, "demo-starter-key", fasthttp.StatusTooManyRequests)
}

// tcpPeer is a connection whose peer has a TCP address, as a client's has.
type tcpPeer struct {
	net.Conn
	peer *net.TCPAddr
}

func (c tcpPeer) RemoteAddr() net.Addr { return c.peer }
