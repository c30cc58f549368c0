package admission

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/fakeclock"
	"github.com/fairgate/fairgate/tenant"
)

// dailyStarter is the test tenants with a daily quota of 1000 tokens on the
// starter tier, beside its own bucket (5 a second, burst 25).
func dailyStarter(t testing.TB) *tenant.Registry {
	return testRegistryOf(t, withStarter(testTenants(5), func(tc *tenant.TierConfig) {
		tc.Limits = []tenant.LimitConfig{{Name: "daily", Burst: 1000, Per: tenant.Per(24 * time.Hour)}}
	}))
}

// clockedGate builds a gate of cfg and reg on a fake clock.
func clockedGate(t *testing.T, cfg Config, reg *tenant.Registry) (*Gate, *fakeclock.Clock) {
	t.Helper()
	clk := fakeclock.New()
	g, err := New(cfg, reg, Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	return g, clk
}

// TestDailyQuotaBindsAfterBurstRefills: at five requests a second the
// per-second bucket (burst 25) never refuses and refills forty times over
// while the daily quota of 1000 drains; then the daily quota refuses, with
// a Retry-After that is its own wait, while the per-second bucket is full,
// and the headers name both policies and describe the tightest.
func TestDailyQuotaBindsAfterBurstRefills(t *testing.T) {
	g, clk := clockedGate(t, testConfig(), dailyStarter(t))
	me := req("start-key", "GET", "/api/v1/users/me")
	var d Decision
	n := 0
	for ; ; n++ {
		if n%5 == 0 && n > 0 {
			clk.Advance(time.Second)
		}
		if d = mustCheck(t, g, me); !d.Allowed {
			break
		}
		if n > 1010 {
			t.Fatalf("%d requests admitted on a daily quota of 1000", n)
		}
	}
	// 200 s of a day's 1000 tokens refill about 2.3.
	if n < 1000 || n > 1003 {
		t.Fatalf("refused after %d requests, want the daily quota of 1000 to bind then", n)
	}
	if d.Reason != ReasonLimitQuota || d.NQuotas != 2 || d.Quotas[1].Name != "daily" {
		t.Fatalf("request %d: %+v, want limit_quota from daily", n, d)
	}
	if d.Quotas[0].Wait != 0 || d.Quotas[0].Remaining < 20 {
		t.Fatalf("the tenant's own bucket: %+v, want nearly full and not the one that refused", d.Quotas[0])
	}
	if want := time.Duration(math.Ceil((1 - d.Quotas[1].Remaining) / (1000.0 / 86400) * 1e9)); math.Abs(float64(d.RetryAfter-want)) > 1e3 {
		t.Fatalf("RetryAfter = %v, want the daily bucket's wait %v", d.RetryAfter, want)
	}

	w := serveMe(g)
	for k, want := range map[string]string{
		"Ratelimit-Policy":    `"tenant";q=25;w=5, "daily";q=1000;w=86400`,
		"Ratelimit-Limit":     "1000",
		"Ratelimit-Remaining": "0",
		"Retry-After":         fmt.Sprint(ceilSeconds(d.RetryAfter, 1)),
	} {
		if got := w.Header().Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if got := w.Header().Get("Ratelimit"); !strings.Contains(got, `"daily";r=0;t=`) {
		t.Errorf("RateLimit = %q, want the daily bucket's state", got)
	}
	if !strings.Contains(w.Body.String(), "over its daily limit") {
		t.Errorf("body %s does not name the limit", w.Body)
	}
	clk.Advance(d.RetryAfter)
	if d := mustCheck(t, g, me); !d.Allowed {
		t.Fatalf("after the Retry-After it was told: %+v", d)
	}
}

// serveMe answers one GET /api/v1/users/me of start-key through g's
// middleware, for its headers and body.
func serveMe(g *Gate) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/api/v1/users/me", nil)
	r.Header.Set("X-API-Key", "start-key")
	g.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(w, r)
	return w
}

// TestLimitsAllOrNothing: a request one bucket refuses takes nothing from
// the others, and when several refuse, Retry-After is the longest wait.
func TestLimitsAllOrNothing(t *testing.T) {
	g, clk := clockedGate(t, testConfig(), testRegistryOf(t, withStarter(testTenants(5), func(tc *tenant.TierConfig) {
		tc.Limits = []tenant.LimitConfig{{Name: "minute", Burst: 30, Per: tenant.Per(time.Minute)}}
	})))
	search := req("start-key", "GET", "/api/v1/search")
	for range 5 { // 25 of the minute's 30, all of the tenant's 25
		mustCheck(t, g, search)
	}
	clk.Advance(2 * time.Second) // the tenant's bucket: 10; the minute's: 6
	before := mustCheck(t, g, search)
	if !before.Allowed || before.Quotas[0].Remaining != 5 || before.Quotas[1].Remaining != 1 {
		t.Fatalf("search after 2s: %+v, want admitted leaving 5 and 1", before.Quotas[:before.NQuotas])
	}
	d := mustCheck(t, g, search)
	if d.Allowed || d.Reason != ReasonLimitQuota || d.Quotas[0].Remaining != 5 || d.Quotas[0].Wait != 0 {
		t.Fatalf("refused by the minute's bucket: %+v; the tenant's must still hold 5", d)
	}
	if d := mustCheck(t, g, req("start-key", "GET", "/api/v1/users/me")); !d.Allowed || d.Quotas[0].Remaining != 4 {
		t.Fatalf("a cheap request after the refusal: %+v, want admitted from the tenant's untouched 5", d)
	}
	// Now both refuse a search: the tenant's bucket (4 of 5) waits 0.2 s,
	// the minute's (0 of 5) 10 s; Retry-After is the longer.
	d = mustCheck(t, g, search)
	if d.Allowed || d.Quotas[0].Wait != 200*time.Millisecond || d.RetryAfter != 10*time.Second || d.Reason != ReasonLimitQuota {
		t.Fatalf("both refuse: %+v (retry %v), want retry 10s from the minute's bucket", d.Quotas[:d.NQuotas], d.RetryAfter)
	}
}

// TestLimitsMatchReference is the property test: 240 seeded cases, each a
// random starter tier (its own bucket, a group, one to four limits by rate
// or by per) and a random stream of requests, decided by the gate and by a
// small reference model of all-or-nothing token buckets. Every decision,
// its reason and its wait agree, and every bucket's tokens.
func TestLimitsMatchReference(t *testing.T) {
	refused := map[Reason]int{}
	for c := range 240 {
		t.Run(fmt.Sprint(c), func(t *testing.T) { checkAgainstReference(t, uint64(c), refused) })
	}
	t.Logf("refusals over 240 cases of 60 requests: %v", refused)
	for _, r := range []Reason{ReasonTenantQuota, ReasonGroupQuota, ReasonLimitQuota} {
		if refused[r] < 50 {
			t.Errorf("only %d refusals for %v: the cases do not test it", refused[r], r)
		}
	}
}

// refBucket is the reference model's bucket: tokens at instant last; or,
// with every set, a fixed window of every (aligned as time.Truncate
// aligns it), with tokens left until end.
type refBucket struct {
	rate, burst, tokens float64
	last                time.Time
	every               time.Duration
	end                 time.Time
}

func (b *refBucket) at(now time.Time) float64 {
	if b.every > 0 {
		if !now.Before(b.end) {
			return b.burst
		}
		return b.tokens
	}
	return math.Min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
}

// wait is the time until b holds cost at now.
func (b *refBucket) wait(now time.Time, cost float64) time.Duration {
	if b.every > 0 {
		return now.Truncate(b.every).Add(b.every).Sub(now)
	}
	return time.Duration(math.Ceil((cost - b.at(now)) / b.rate * 1e9))
}

// take takes cost from b at now.
func (b *refBucket) take(now time.Time, cost float64) {
	tok := b.at(now)
	if b.every > 0 {
		b.end = now.Truncate(b.every).Add(b.every)
	}
	b.tokens, b.last = tok-cost, now
}

func checkAgainstReference(t *testing.T, seed uint64, refused map[Reason]int) {
	rng := rand.New(rand.NewPCG(seed, 1414))
	between := func(lo, hi float64) float64 { return math.Round(lo + rng.Float64()*(hi-lo)) }
	own := tenant.Quota{Rate: between(1, 50), Burst: between(10, 100)}
	group := tenant.Quota{Rate: between(1, 20) / 4, Burst: between(10, 60)}
	var limits []tenant.LimitConfig
	for i := range 1 + rng.IntN(tenant.MaxLimits) {
		l := tenant.LimitConfig{Name: fmt.Sprint("l", i), Burst: between(10, 400)}
		switch rng.IntN(3) {
		case 0:
			l.Rate = between(1, 30) / 3
		case 1:
			l.Per = tenant.Per([]time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour}[rng.IntN(4)])
		default:
			l.Per, l.Window = tenant.Per([]time.Duration{time.Second, 10 * time.Second, time.Minute}[rng.IntN(3)]), tenant.WindowFixed
			l.Burst = between(10, 60)
		}
		limits = append(limits, l)
	}
	tc := testTenants(own.Rate)
	tc.Tiers["starter"] = tenant.TierConfig{Rate: own.Rate, Burst: own.Burst, Groups: map[string]tenant.Quota{"exports": group}, Limits: limits}
	cfg := Config{Routes: []RouteConfig{
		{Method: "GET", Path: "/a", Cost: 1},
		{Method: "GET", Path: "/b", Cost: 3},
		{Method: "POST", Path: "/export", Cost: 7, Group: "exports"},
	}}
	g, clk := clockedGate(t, cfg, testRegistryOf(t, tc))
	ref := []*refBucket{{rate: own.Rate, burst: own.Burst}, {rate: group.Rate, burst: group.Burst}}
	for _, l := range limits {
		r := l.Resolve()
		ref = append(ref, &refBucket{rate: r.Rate, burst: r.Burst, every: r.Window.Every})
	}
	for _, b := range ref {
		b.tokens, b.last = b.burst, clk.Now()
	}
	for step := range 60 {
		clk.Advance(time.Duration(rng.IntN(2000)) * time.Millisecond)
		now := clk.Now()
		path, cost, grouped := "/a", 1.0, false
		switch rng.IntN(3) {
		case 1:
			path, cost = "/b", 3
		case 2:
			path, cost, grouped = "/export", 7, true
		}
		method := "GET"
		if grouped {
			method = "POST"
		}
		// The reference: the buckets this request is charged to, in the
		// order Decision.Quotas reports them.
		charged := []*refBucket{ref[0]}
		if grouped {
			charged = append(charged, ref[1])
		}
		charged = append(charged, ref[2:]...)
		worst, wait, allowed := -1, time.Duration(0), true
		for i, b := range charged {
			if tok := b.at(now); tok < cost {
				allowed = false
				if w := b.wait(now, cost); worst < 0 || w > wait {
					worst, wait = i, w
				}
			}
		}
		d := mustCheck(t, g, req("start-key", method, path))
		if d.Allowed != allowed || d.NQuotas != len(charged) {
			t.Fatalf("step %d %s: gate %+v, reference allowed=%v over %d buckets", step, path, d, allowed, len(charged))
		}
		if !allowed {
			want := ReasonTenantQuota
			switch {
			case worst >= len(charged)-len(limits):
				want = ReasonLimitQuota
			case worst > 0:
				want = ReasonGroupQuota
			}
			// The store rounds its wait up to the nanosecond from a
			// different float expression.
			if d.Reason != want || (d.RetryAfter-wait).Abs() > time.Microsecond {
				t.Fatalf("step %d %s: refused for %v after %v, reference %v after %v", step, path, d.Reason, d.RetryAfter, want, wait)
			}
			refused[d.Reason]++
		}
		for i, b := range charged {
			if allowed {
				b.take(now, cost)
			}
			if got, want := d.Quotas[i].Remaining, b.at(now); math.Abs(got-want) > 1e-9 {
				t.Fatalf("step %d %s: bucket %s holds %v, reference %v", step, path, d.Quotas[i].Name, got, want)
			}
		}
	}
}

// TestLimitsConfigErrors: what New refuses about limits and shadow names
// the field.
func TestLimitsConfigErrors(t *testing.T) {
	daily := dailyStarter(t)
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		reg  *tenant.Registry
		o    Options
		want string
	}{
		{"cost above a limit's burst", func(c *Config) { c.Routes[1].Cost = 30 }, testRegistryOf(t, withStarter(testTenants(5), func(tc *tenant.TierConfig) {
			tc.Burst = 40
			tc.Limits = []tenant.LimitConfig{{Name: "minute", Burst: 20, Per: tenant.Per(time.Minute)}}
		})), Options{}, "routes[1].cost: 30 is above tenant initech's limits.minute.burst (20)"},
		{"a store that takes one bucket at a time", func(*Config) {}, daily, Options{Store: &scriptedStore{}}, "tiers.starter.limits: the store (*admission.scriptedStore) cannot take several buckets at once"},
		{"shadow on a route without a tenant", func(c *Config) {
			c.Routes = append(c.Routes, RouteConfig{Method: "GET", Path: "/health", Auth: AuthNone, Shadow: true})
		},
			daily, Options{}, "routes[3].auth: a route with auth: none has no tenant, so no group, pool or shadow"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			tc.cfg(&cfg)
			_, err := New(cfg, tc.reg, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
