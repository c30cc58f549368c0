package admission

import (
	"testing"
	"time"

	"github.com/fairgate/fairgate/admission/redisstore"
	"github.com/fairgate/fairgate/internal/redistest"
	"github.com/fairgate/fairgate/tenant"
)

// TestLimitsOnRedis: on a real Redis, two gateway instances share a
// tenant's several limits, taken in one Lua call: together they admit
// what one would (the hourly limit's 60 tokens), a refused export takes
// nothing from the group's bucket or the other limits, and the refusal
// names the limit with the longest wait. The limits refill in hours, so
// the test's own run time moves them by a few thousandths of a token.
func TestLimitsOnRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	cfg := redisstore.Config{Addrs: []string{srv.Addr()}, Timeout: time.Second, FailurePolicy: redisstore.FailClosed, Instances: 2}
	reg := testRegistryOf(t, withStarter(testTenants(1000), func(tc *tenant.TierConfig) {
		tc.Burst = 1000 // the tenant's own bucket never refuses here
		tc.Groups = map[string]tenant.Quota{"exports": {Rate: 0.001, Burst: 40}}
		tc.Limits = []tenant.LimitConfig{{Name: "hourly", Burst: 60, Per: tenant.Per(time.Hour)}, {Name: "daily", Burst: 100, Per: tenant.Per(24 * time.Hour)}}
	}))
	var gates [2]*Gate
	for i := range gates {
		var err error
		if gates[i], err = New(testConfig(), reg, Options{Store: redisStoreOn(t, srv, cfg)}); err != nil {
			t.Fatal(err)
		}
	}
	export := req("start-key", "POST", "/api/v1/reports/export")
	search := req("start-key", "GET", "/api/v1/search")
	// One export (20 of each bucket), then searches of 5 alternately on
	// both instances until the hourly limit (60) refuses.
	if d := mustCheck(t, gates[0], export); !d.Allowed || d.NQuotas != 4 {
		t.Fatalf("first export: %+v", d)
	}
	admitted := 0
	for i := 0; ; i++ {
		d := mustCheck(t, gates[i%2], search)
		if !d.Allowed {
			if d.Reason != ReasonLimitQuota || d.Quotas[1].Name != "hourly" || d.Quotas[1].Wait == 0 { // a search has no group
				t.Fatalf("search refused: %+v, want limit_quota from hourly", d)
			}
			break
		}
		if admitted++; admitted > 8 {
			t.Fatalf("%d searches admitted by two instances after an export, want 8 (the hourly 60)", admitted)
		}
	}
	if admitted != 8 {
		t.Fatalf("%d searches admitted by two instances after an export, want 8 (the hourly 60)", admitted)
	}
	// The hourly bucket is empty and the group's holds 20: an export is
	// refused by the hourly limit (its wait, 20 min, is the longest) and
	// charges neither the group's bucket nor the daily limit.
	d := mustCheck(t, gates[1], export)
	if d.Allowed || d.Reason != ReasonLimitQuota || d.RetryAfter < 19*time.Minute || d.RetryAfter > 20*time.Minute {
		t.Fatalf("export: %+v (retry %v), want refused by hourly, retry about 20m", d.Quotas[:d.NQuotas], d.RetryAfter)
	}
	if g, daily := d.Quotas[1], d.Quotas[3]; g.Name != "exports" || g.Remaining < 20 || g.Remaining > 20.01 || daily.Name != "daily" || daily.Remaining < 40 || daily.Remaining > 40.01 {
		t.Fatalf("after the refused export: group %+v, daily %+v, want 20 and 40 left (nothing charged)", g, daily)
	}
}
