package gateway

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairgate/fairgate/bulkhead"
	"github.com/fairgate/fairgate/shed"
)

// TestQueuedClientGoneIsNeverProxied (issue 12): net/http notices that a
// client went away only once the request body has been read, so a queued
// POST whose client had gone was still proxied when it got a seat. The
// body is now read before the bulkhead queue: the client's disconnect
// cancels its wait, and the upstream never sees it.
func TestQueuedClientGoneIsNeverProxied(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	base, up, srv := startGateway(t, func(c *Config) {
		c.Admission.Adaptive = nil
		c.Admission.Shedding = &shed.SheddingConfig{Disabled: true}
		c.Admission.Bulkhead = &bulkhead.Config{Total: 3, Pools: map[string]bulkhead.PoolConfig{
			"enterprise": {Share: 1, QueueLength: 4, MaxWait: 10 * time.Second},
			"pro":        {Share: 1, QueueLength: 4, MaxWait: 10 * time.Second},
			"starter":    {Share: 1, QueueLength: 4, MaxWait: 10 * time.Second},
		}}
	}, Options{})
	t.Cleanup(unblock) // before startGateway's cleanups run: a failure must not hang them
	up.handler = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			<-release
		}
	}
	queued := func() int {
		st, _ := srv.Gate().TenantState("initech")
		return st.PoolStats.Queued
	}
	hold := make(chan int)
	go func() { hold <- do(t, "GET", base+"/hold", "demo-starter-key", nil).status }()
	waitFor(t, func() bool { _, seats := held(t, srv, "initech"); return seats == 1 })

	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(conn, "POST /api/v1/search HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer demo-starter-key\r\nContent-Length: 5\r\n\r\nhello")
	waitFor(t, func() bool { return queued() == 1 })
	conn.Close()
	waitFor(t, func() bool { return queued() == 0 })

	unblock()
	if s := <-hold; s != 200 {
		t.Fatalf("held request: %d", s)
	}
	waitReleased(t, srv, "initech")
	up.mu.Lock()
	defer up.mu.Unlock()
	for _, r := range up.reqs {
		if r.Method == "POST" {
			t.Fatal("the upstream saw the POST of a client that had gone")
		}
	}
}
