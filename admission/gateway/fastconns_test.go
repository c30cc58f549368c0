package gateway

import (
	"net"
	"strings"
	"testing"
)

// TestTrackedConnBinds: a request's X-Request-Id binds its connection
// even split between two writes; a body that spells out an ID the edge is
// not sending binds nothing (and leaves nothing behind).
func TestTrackedConnBinds(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() {
		buf := make([]byte, 1<<16)
		for {
			if _, err := b.Read(buf); err != nil {
				return
			}
		}
	}()
	u := newUpstreamConns()
	c := u.wrap(a)
	const id, other = "0123456789abcdef", "fedcba9876543210"
	u.expect(id)
	head := "GET / HTTP/1.1\r\nHost: x\r\nX-Request-Id: " + id + "\r\n\r\n"
	cut := strings.Index(head, "Id: ") + 6 // inside the field's value
	c.Write([]byte(head[:cut]))
	c.Write([]byte(head[cut:]))
	if got := u.done(id); got != c {
		t.Fatalf("a field split between two writes did not bind the connection")
	}
	// A body naming another ID, not one being sent.
	u.expect(id)
	c.Write([]byte(head + "\r\nX-Request-Id: " + other + "\r\n"))
	u.mu.Lock()
	_, leaked := u.byID[other]
	u.mu.Unlock()
	if leaked {
		t.Fatal("a body's ID was registered")
	}
	if got := u.done(id); got != c {
		t.Fatal("the request's own ID did not bind")
	}
	if c.requests != 2 {
		t.Fatalf("requests %d, want 2", c.requests)
	}
}
