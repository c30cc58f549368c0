package admission

import (
	"context"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // Europe/Berlin, whatever the machine has

	"gopkg.in/yaml.v3"

	"github.com/fairgate/fairgate/tenant"
)

// TestDailyWindowResetsAtLocalMidnight: a limit of 30 a calendar day in
// Europe/Berlin, as a file spells it, spent by 30 requests at 23:50 (the
// tenant's own bucket, burst 25, refilled between them), refuses the next
// there with a Retry-After of the 10 minutes to Berlin's midnight (not
// UTC's, 70 minutes later), and the new day starts full.
func TestDailyWindowResetsAtLocalMidnight(t *testing.T) {
	var daily tenant.LimitConfig
	if err := yaml.Unmarshal([]byte(`{name: daily, burst: 30, per: day, window: fixed, time_zone: Europe/Berlin}`), &daily); err != nil {
		t.Fatal(err)
	}
	g, clk := clockedGate(t, testConfig(), testRegistryOf(t, withStarter(testTenants(5), func(tc *tenant.TierConfig) {
		tc.Limits = []tenant.LimitConfig{daily}
	})))
	// The fake clock starts at 2026-11-30 00:00 UTC, 01:00 in Berlin.
	midnight := clk.Now().Add(23 * time.Hour)
	clk.Advance(22*time.Hour + 50*time.Minute) // 23:50 in Berlin
	me := req("start-key", "GET", "/api/v1/users/me")
	for i := range 30 {
		if i%5 == 4 {
			clk.Advance(time.Second) // the tenant's own bucket never binds
		}
		if d := mustCheck(t, g, me); !d.Allowed || d.Quotas[1].Reset != midnight.Sub(clk.Now()) {
			t.Fatalf("request %d: %+v, want admitted with the window ending at Berlin's midnight", i, d)
		}
	}
	clk.Advance(4 * time.Second) // 9m50s before midnight
	d := mustCheck(t, g, me)
	if d.Allowed || d.Reason != ReasonLimitQuota || d.RetryAfter != 10*time.Minute-10*time.Second {
		t.Fatalf("request 31: %+v, want limit_quota until Berlin's midnight in 9m50s", d)
	}
	w := serveMe(g)
	for k, want := range map[string]string{
		"Ratelimit-Policy": `"tenant";q=25;w=5, "daily";q=30;w=86400`,
		"Ratelimit":        `"daily";r=0;t=590`,
		"Retry-After":      "590",
	} {
		if got := w.Header().Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	clk.Advance(10*time.Minute - 10*time.Second - time.Nanosecond)
	if d := mustCheck(t, g, me); d.Allowed {
		t.Fatalf("a nanosecond before midnight: %+v, want refused", d)
	}
	clk.Advance(time.Nanosecond)
	for i := range 25 {
		if d := mustCheck(t, g, me); !d.Allowed || d.Quotas[1].Reset != 24*time.Hour {
			t.Fatalf("request %d of the new day: %+v, want admitted, the window a whole day", i, d)
		}
	}
}

// TestWindowConfigErrors: what validation refuses of a fixed window names
// the field and says how to fix it.
func TestWindowConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		limit string
		want  string
	}{
		{`{name: daily, burst: 3, per: dya}`, `limits[0].per: must be a duration (24h) or one of second, minute, hour, day, week, month, year; got "dya"`},
		{`{name: daily, burst: 3, per: day, window: fixd}`, `limits[0].window: must be bucket or fixed, got "fixd"`},
		{`{name: daily, burst: 3, rate: 1, window: fixed}`, `limits[0]: a fixed window counts burst requests per window: set per`},
		{`{name: daily, burst: 3, per: day, window: fixed, mode: sync}`, `limits[0].mode: a fixed window is always decided exactly`},
		{`{name: daily, burst: 3, per: day, time_zone: Europe/Berlin}`, `limits[0].time_zone: applies to fixed windows only`},
		{`{name: daily, burst: 3, per: 24h, window: fixed, time_zone: Europe/Berlin}`, `limits[0].time_zone: applies to a calendar unit`},
		{`{name: daily, burst: 3, per: day, window: fixed, time_zone: Europe/Berlinn}`, `limits[0].time_zone: "Europe/Berlinn" is not an IANA time zone`},
		{`{name: daily, burst: 3, per: day, window: fixed, time_zone: Local}`, `limits[0].time_zone: "Local" is not an IANA time zone`},
	} {
		var l tenant.LimitConfig
		if err := yaml.Unmarshal([]byte(tc.limit), &l); err != nil {
			t.Fatalf("%s: %v", tc.limit, err)
		}
		c := withStarter(testTenants(5), func(tier *tenant.TierConfig) { tier.Limits = []tenant.LimitConfig{l} })
		_, err := tenant.NewRegistry(c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.limit, err, tc.want)
		}
	}
}

// TestReloadShorterWindowCountsAfresh: a monthly window made a daily one
// by a reload starts a fresh count; the month's would otherwise refuse
// every day until the month ended.
func TestReloadShorterWindowCountsAfresh(t *testing.T) {
	regOf := func(spec string) *tenant.Registry {
		var l tenant.LimitConfig
		if err := yaml.Unmarshal([]byte(spec), &l); err != nil {
			t.Fatal(err)
		}
		return testRegistryOf(t, withStarter(testTenants(5), func(tc *tenant.TierConfig) { tc.Limits = []tenant.LimitConfig{l} }))
	}
	g, clk := clockedGate(t, testConfig(), regOf(`{name: quota, burst: 30, per: month, window: fixed}`))
	clk.Advance(25 * time.Hour) // 2026-12-01 01:00 UTC
	me := req("start-key", "GET", "/api/v1/users/me")
	for i := range 30 {
		if i%20 == 19 {
			clk.Advance(5 * time.Second)
		}
		mustCheck(t, g, me)
	}
	if d := mustCheck(t, g, me); d.Allowed {
		t.Fatalf("31st request of the month admitted: %+v", d)
	}
	if err := g.Reload(context.Background(), testConfig(), regOf(`{name: quota, burst: 30, per: day, window: fixed}`)); err != nil {
		t.Fatal(err)
	}
	clk.Advance(48 * time.Hour)
	if d := mustCheck(t, g, me); !d.Allowed {
		t.Errorf("two days after the month became a day: refused, retry after %v", d.RetryAfter)
	}
}
