package gateway

import (
	"net"
	"testing"
	"time"

	"github.com/fairgate/fairgate/admission/redisstore"
)

// TestRedisUnreachableAtStart: a Redis that does not answer does not stop
// the gateway from starting or serving: the failure policy (local, the
// default) decides, each instance enforcing its share of the quota.
func TestRedisUnreachableAtStart(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	base, _, _ := startGateway(t, func(c *Config) {
		c.Redis = &redisstore.Config{Addrs: []string{dead}, Timeout: 20 * time.Millisecond, Instances: 1}
	}, Options{})
	start := time.Now()
	if r := do(t, "GET", base+"/api/v1/users/me", "demo-enterprise-key", nil); r.status != 200 {
		t.Fatalf("with Redis unreachable: %d %s", r.status, r.body)
	}
	// The starter's quota still holds, locally: five searches, then 429.
	for i := range 5 {
		if r := do(t, "GET", base+"/api/v1/search", "demo-starter-key", nil); r.status != 200 {
			t.Fatalf("search %d: %d", i, r.status)
		}
	}
	if r := do(t, "GET", base+"/api/v1/search", "demo-starter-key", nil); r.status != 429 {
		t.Fatalf("6th search with Redis down: %d, want 429 from the local policy", r.status)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("7 requests took %v with Redis down", d)
	}
}
