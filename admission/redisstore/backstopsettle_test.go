package redisstore

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/fairshare"
	"github.com/fairgate/fairgate/internal/redistest"
)

// TestSettleBackstopMatchesMemoryStore: a settlement at the fair global
// backstop does on Redis, exact and in sync mode, what it does on the
// embedded store: a tenant above its share whose usage the bucket cannot
// give is charged what it holds and owes the rest, refused until that is
// paid, while a tenant within its share still takes the reserve; a
// refund pays the debt first.
func TestSettleBackstopMatchesMemoryStore(t *testing.T) {
	exact, synced := redistest.StartServer(t), redistest.StartServer(t)
	stores := map[string]interface {
		ratelimit.BackstopStore
		ratelimit.BackstopSettler
	}{
		"memory": ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{}),
		"exact": newTestStore(t, []string{exact.Addr()}, func(c *Config) {
			c.Timeout, c.FailurePolicy, c.BackstopMode = time.Second, FailClosed, BackstopExact
		}, Options{}),
		"sync": newTestStore(t, []string{synced.Addr()}, func(c *Config) {
			c.Timeout, c.FailurePolicy = time.Second, FailClosed
		}, Options{}),
	}
	// A bucket that refills a token in 1000 s: the test's run time
	// changes nothing.
	l := fairshare.BackstopLimit{Rate: 0.001, Burst: 100, Window: 10 * time.Second}
	for name, s := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			take := func(tenant string, want bool) fairshare.BackstopResult {
				t.Helper()
				r, err := s.TakeBackstop(ctx, l, fairshare.BackstopRequest{Tenant: tenant, Weight: 1, Cost: 2, Class: fairshare.Default})
				if err != nil || r.Allowed != want {
					t.Fatalf("%s: %+v, %v; want allowed %v", tenant, r, err, want)
				}
				return r
			}
			settle := func(tenant string, cost float64) {
				t.Helper()
				if err := s.SettleBackstop(ctx, l, tenant, cost); err != nil {
					t.Fatal(err)
				}
			}
			take("heavy", true)
			// Used 302 of a reserve of 2: above its share now, it is
			// charged the 98 left and owes 202.
			settle("heavy", 300)
			if r := take("heavy", false); r.RetryAfter < time.Duration(200/l.Rate)*time.Second {
				t.Fatalf("heavy in debt: retry after %v, want the refill of its debt (over 200 tokens)", r.RetryAfter)
			}
			// light is within its share: the reserve is there for it.
			if r := take("light", true); math.Abs(r.Tokens+2) > 0.01 {
				t.Fatalf("light took from the reserve: %v tokens left, want -2", r.Tokens)
			}
			// A refund of 250 pays heavy's 202 first, then gives the
			// bucket 48: from -2 to 46, above a default request's floor
			// (25) with room for heavy's next.
			settle("heavy", -250)
			if r := take("heavy", true); math.Abs(r.Tokens-44) > 0.01 {
				t.Fatalf("heavy after its debt was refunded: %v tokens left, want 44", r.Tokens)
			}
		})
	}
}
