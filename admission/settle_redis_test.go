package admission

import (
	"context"
	"net/http"
	"testing"

	"github.com/fairgate/fairgate/admission/redisstore"
	"github.com/fairgate/fairgate/internal/faultproxy"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/tenant"
)

// TestSettleOnRedisAcrossInstances: two instances on one Redis. A request
// admitted by an instance that dies before its upstream answers keeps its
// reserve (nobody settles it); one settled by the other instance is
// charged what it used, once; a settlement the store fails leaves the
// reserve standing.
func TestSettleOnRedisAcrossInstances(t *testing.T) {
	srv := redistest.StartServer(t)
	cfg := redisstore.Config{FailurePolicy: redisstore.FailClosed}
	reg := testRegistryOf(t, withStarter(testTenants(1000), func(tc *tenant.TierConfig) {
		tc.Rate, tc.Burst = 0.001, 25 // the test's run time refills a thousandth of a token
	}))
	// Instance 1 reaches Redis through a proxy that can cut it off.
	proxy, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	stores := [2]*redisstore.Store{redisStoreOn(t, srv, cfg), redisStoreAt(t, proxy.Addr(), cfg)}
	var gates [2]*Gate
	for i := range gates {
		var err error
		if gates[i], err = New(Config{Routes: settledRoutes(t)}, reg, Options{Store: stores[i]}); err != nil {
			t.Fatal(err)
		}
	}
	admit := func(g *Gate) Decision {
		t.Helper()
		h := http.Header{}
		h.Set("X-API-Key", "start-key")
		d, err := g.Check(context.Background(), Request{Method: "POST", Path: "/v1/complete", Header: h})
		if err != nil || !d.Allowed {
			t.Fatalf("refused: %v %+v", err, d)
		}
		return d
	}
	remaining := func(d Decision) float64 { return d.Quotas[0].Remaining }

	// Instance 0 admits a request and dies with it in flight: its
	// reserve (2) stands, as nobody will settle it.
	lost := admit(gates[0])
	lost.Lease().StartUpstream(context.Background())
	stores[0].Close()
	d := admit(gates[1])
	if r := remaining(d); r < 20.99 || r > 21.01 {
		t.Fatalf("after a reserve whose instance died and one of its own: %v left, want 21", r)
	}
	// Instance 1's request used 10: charged 8 beyond its reserve, once.
	l := d.Lease()
	l.StartUpstream(context.Background())
	l.AnsweredStatus(http.StatusOK)
	l.ReportUsage("10")
	l.Release()
	if r := remaining(admit(gates[1])); r < 10.99 || r > 11.01 {
		t.Fatalf("after settling 10 and another reserve: %v left, want 25 − 2 − 10 − 2 = 11", r)
	}
	// Redis is out of reach when the next request is settled: the
	// settlement fails and its reserve stands, though it used nothing.
	d = admit(gates[1])
	proxy.Set(faultproxy.Fault{Mode: faultproxy.Drop})
	l = d.Lease()
	l.StartUpstream(context.Background())
	l.AnsweredStatus(http.StatusOK)
	l.ReportUsage("0")
	l.Release()
	proxy.Set(faultproxy.Fault{})
	if r := remaining(admit(gates[1])); r < 6.99 || r > 7.01 {
		t.Fatalf("after a settlement Redis never saw: %v left, want 11 − 2 − 2 = 7 (its reserve stands)", r)
	}
}
