//go:build !race

package gateway

import (
	"io"
	"net"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestFastEdgeRejectAllocs: a 429 on the fasthttp edge's handler, the
// whole of it (hygiene, pipeline, the answer), allocates at most once:
// its request ID. (Without the race detector: its sync.Pool drops items.)
func TestFastEdgeRejectAllocs(t *testing.T) {
	e := benchFastEdge(t)
	conn, peer := net.Pipe()
	defer peer.Close()
	rc := new(fasthttp.RequestCtx)
	rc.Init2(newEdgeConn(tcpPeer{conn, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}}, e.watcher), nil, true)
	serve := func() int {
		rc.Request.Reset()
		rc.Request.SetRequestURI("/api/v1/users/me")
		rc.Request.Header.SetHost("gateway.example")
		rc.Request.Header.Set("Authorization", "Bearer demo-starter-key")
		rc.Response.Reset()
		e.serve(rc)
		rc.Response.BodyWriteTo(io.Discard)
		return rc.Response.StatusCode()
	}
	for range 25 { // spend the starter tier's burst of 20 (benchConfig)
		serve()
	}
	status := 0
	n := testing.AllocsPerRun(500, func() { status = serve() })
	if status != 429 || n > 1 {
		t.Errorf("status %d, %.1f allocations per 429, want 429 and at most 1", status, n)
	}
}
