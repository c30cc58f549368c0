package client_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fairgate/fairgate/client"
)

// offer is a caller that wants to send GET url+paths[i%len(paths)] every
// `every` for dur of virtual time, one request at a time: when the
// transport holds a request back, the caller falls behind its schedule
// and sends the next one as soon as it may.
func offer(t *testing.T, c *http.Client, clk *virtualClock, url string, paths []string, every, dur time.Duration) (ok, failed int) {
	t.Helper()
	start := clk.Now()
	for i := 0; ; i++ {
		due := start.Add(time.Duration(i) * every)
		if now := clk.Now(); due.After(now) {
			clk.Sleep(context.Background(), due.Sub(now))
		}
		if !clk.Now().Before(start.Add(dur)) {
			return ok, failed
		}
		status, err := get(context.Background(), c, url+paths[i%len(paths)])
		switch {
		case status == http.StatusOK:
			ok++
		case errors.As(err, new(*client.RejectedError)):
			failed++
		default:
			t.Fatalf("%d, %v", status, err)
		}
	}
}

// TestPacingKeepsUnderQuota offers three times a token bucket's quota. A
// paced client gets no 429 at all and still uses (nearly) all of its
// quota; the negative control, the same client without pacing, runs into
// 429s.
func TestPacingKeepsUnderQuota(t *testing.T) {
	const burst, rate = 25, 5 // fairgate's starter tier: 25 tokens, 5 a second
	const dur = 120 * time.Second
	costs := map[string]float64{"/cheap": 1, "/search": 5}
	tests := []struct {
		name     string
		trioOnly bool
		paths    []string
	}{
		{"cost 1", false, []string{"/cheap"}},
		{"cost 5", false, []string{"/search"}},
		{"mixed costs", false, []string{"/cheap", "/search"}},
		{"cost 1, trio only", true, []string{"/cheap"}},
		{"cost 5, trio only", true, []string{"/search"}},
	}
	for _, tt := range tests {
		var cost float64
		for _, p := range tt.paths {
			cost += costs[p] / float64(len(tt.paths))
		}
		every := time.Duration(float64(time.Second) * cost / rate / 3) // 3× the quota
		for _, paced := range []bool{true, false} {
			t.Run(pacedName(tt.name, paced), func(t *testing.T) {
				clk := newVirtualClock()
				up := &tokenBucket{clock: clk, burst: burst, rate: rate, trioOnly: tt.trioOnly, costs: costs}
				c, tr := newClient(t, clk, client.Config{DisablePacing: !paced})
				okN, failed := offer(t, c, clk, serve(t, up), tt.paths, every, dur)
				admitted, limited, units := up.counts()
				t.Logf("%d ok, %d failed; upstream: %d admitted, %d 429s, %.0f units; stats %+v", okN, failed, admitted, limited, units, tr.Stats())
				judgePacing(t, paced, admitted, limited, failed, units, rate*dur.Seconds())
			})
		}
	}
}

// pacedName names a subtest of a paced run or of its negative control.
func pacedName(name string, paced bool) string {
	if paced {
		return name
	}
	return name + ", not paced (control)"
}

// judgePacing judges a run offering three times a quota of `quota` units:
// paced, it must meet no 429 and no failure and still use 90 % of the
// quota; unpaced (the negative control), 429s must come back for at least
// a tenth of the admitted requests, or the run never reached the quota.
func judgePacing(t *testing.T, paced bool, admitted, limited, failed int, units, quota float64) {
	t.Helper()
	if !paced {
		if limited < admitted/10 {
			t.Fatalf("without pacing only %d 429s for %d admitted: the control does not reach the quota", limited, admitted)
		}
		return
	}
	if limited != 0 || failed != 0 {
		t.Fatalf("paced: %d 429s and %d failed requests, want none", limited, failed)
	}
	if units < 0.9*quota {
		t.Fatalf("paced: used %.0f units of a quota of %.0f: pacing is too timid", units, quota)
	}
}

// stream sends `method url` every `every` until end, one request at a
// time (one held back delays the next, which then goes as soon as it
// may, if before end), and returns how long the transport held each back: on a synctest
// bubble's clock, with an upstream that answers at once, the time from
// the call to its return. failed counts the requests that did not end in
// a 200.
func stream(t *testing.T, c *http.Client, method, url string, every time.Duration, end time.Time) (waits []time.Duration, failed int) {
	t.Helper()
	for due := time.Now(); due.Before(end); due = due.Add(every) {
		time.Sleep(time.Until(due))
		if !time.Now().Before(end) {
			break
		}
		req, err := http.NewRequest(method, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		resp, err := c.Do(req)
		waits = append(waits, time.Since(start))
		if err != nil {
			failed++
			continue
		}
		if resp.StatusCode != http.StatusOK {
			failed++
		}
		resp.Body.Close()
	}
	return waits, failed
}

// getsBesideExports streams GETs to getURL every getEvery and, from delay
// on, exports (POST) to exportURL every exportEvery, until end: each GET's
// wait, and how many GETs and exports failed.
func getsBesideExports(t *testing.T, c *http.Client, getURL string, getEvery time.Duration, exportURL string, delay, exportEvery time.Duration, end time.Time) (getWaits []time.Duration, getFailed, exportFailed int) {
	t.Helper()
	var wg sync.WaitGroup
	wg.Go(func() { getWaits, getFailed = stream(t, c, http.MethodGet, getURL, getEvery, end) })
	wg.Go(func() {
		time.Sleep(delay)
		_, exportFailed = stream(t, c, http.MethodPost, exportURL, exportEvery, end)
	})
	wg.Wait()
	return getWaits, getFailed, exportFailed
}

// TestPacingGroupPacesOnlyItsRoutes mixes exports and GETs of one tenant
// with plenty of tokens: the exports, offered at five times their group's
// quota, are paced by the group and meet no 429 after the first has
// taught their cost; no GET waits at all, though the exports keep the
// group's bucket empty. (The first export follows the first GET: a quota
// that every response so far named paces a route not seen yet, so a
// first GET after only exports would wait for the group.)
func TestPacingGroupPacesOnlyItsRoutes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const dur = 60 * time.Second
		up := newQuotaServer([2]float64{500, 100}, map[string][2]float64{"exports": {20, 2}},
			map[string]quotaRoute{"/exports": {cost: 20, group: "exports"}})
		c, err := client.NewClient(client.Config{Base: handlerTransport{up}})
		if err != nil {
			t.Fatal(err)
		}
		end := time.Now().Add(dur)
		getWaits, getFailed, exportFailed := getsBesideExports(t, c, "http://api.test/items", 100*time.Millisecond,
			"http://api.test/exports", 50*time.Millisecond, 2*time.Second, end)

		exports, refused := up.count("/exports")
		gets, _ := up.count("/items")
		t.Logf("%d GETs, %d exports admitted, %d refused", gets, exports, refused)
		for i, w := range getWaits {
			if w != 0 {
				t.Fatalf("GET %d waited %v; want no GET to wait while the tenant has tokens", i, w)
			}
		}
		if getFailed != 0 || refused > 1 || exportFailed != refused {
			t.Fatalf("%d GETs and %d exports failed, %d exports refused; want one export refused at most: the one that teaches the cost", getFailed, exportFailed, refused)
		}
		if units := 20 * float64(exports); units < 0.9*2*dur.Seconds() {
			t.Fatalf("exports used %v units of the group's %v: its pacing is too timid", units, 2*dur.Seconds())
		}
	})
}

// TestPacingCostIsPerRoute mixes exports (20 tokens) and GETs (1) on one
// tenant bucket, together at nine tenths of its quota. A GET is spaced as
// what it costs, not as the average of what the tenant's requests cost:
// no GET waits longer than its own share of the refill (1 token at 10 a
// second, 100 ms), and every one is sent, none refused.
func TestPacingCostIsPerRoute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const dur = 120 * time.Second
		const getEvery = 250 * time.Millisecond
		up := newQuotaServer([2]float64{100, 10}, nil, map[string]quotaRoute{"/export": {cost: 20}})
		c, err := client.NewClient(client.Config{Base: handlerTransport{up}})
		if err != nil {
			t.Fatal(err)
		}
		end := time.Now().Add(dur)
		getWaits, getFailed, exportFailed := getsBesideExports(t, c, "http://api.test/items", getEvery,
			"http://api.test/export", time.Millisecond, 4*time.Second, end)

		exports, refusedExports := up.count("/export")
		gets, refusedGets := up.count("/items")
		var worst time.Duration
		for _, w := range getWaits {
			worst = max(worst, w)
		}
		t.Logf("%d GETs (%d refused), %d exports (%d refused); longest GET wait %v", gets, refusedGets, exports, refusedExports, worst)
		if getFailed != 0 || exportFailed != 0 || refusedGets+refusedExports != 0 {
			t.Fatalf("%d GETs and %d exports failed, %d refused; want none", getFailed, exportFailed, refusedGets+refusedExports)
		}
		if want := int(dur / getEvery); gets != want {
			t.Fatalf("%d GETs sent of the %d offered", gets, want)
		}
		if worst > 100*time.Millisecond {
			t.Fatalf("a GET waited %v: paced as dearer than it is", worst)
		}
	})
}

// TestPacing429HoldScope sends GET /items, two exports (the second
// refused with Retry-After 37 s), GET /items again, a GET to a path not
// seen before and a third export. A refusal by the tenant's quota, by
// its concurrency cap, by a limit every route is charged to, or one
// whose reason is unknown holds every request of the credential for the
// Retry-After; a refusal by the exports group holds only the routes the
// group paces, or, when the 429 does not say which quota refused, only the
// route refused.
func TestPacing429HoldScope(t *testing.T) {
	const policy = `"tenant";q=500;w=5, "daily";q=100000;w=86400`
	tenantOnly := reply{status: 200, header: map[string]string{"RateLimit-Policy": policy, "RateLimit": `"tenant";r=480;t=1`}}
	grouped := reply{status: 200, header: map[string]string{"RateLimit-Policy": policy + `, "exports";q=40;w=20`, "RateLimit": `"exports";r=20;t=10`}}
	refusal := func(layer, reason, field string) reply {
		r := rejection(http.StatusTooManyRequests, 37, layer, reason, "r")
		r.header["RateLimit-Policy"] = grouped.header["RateLimit-Policy"]
		if field != "" {
			r.header["RateLimit"] = field
		}
		return r
	}
	tests := []struct {
		name     string
		refusal  reply
		getsHeld bool
	}{
		{"tenant_quota", refusal("rate", "tenant_quota", `"tenant";r=0;t=5`), true},
		{"max_concurrent", refusal("concurrency", "max_concurrent", ""), true},
		{"no body", reply{status: 429, header: map[string]string{"Retry-After": "37"}}, true},
		{"unknown reason", refusal("rate", "over_budget", `"exports";r=0;t=37`), true},
		{"limit_quota of every route", refusal("rate", "limit_quota", `"daily";r=0;t=37`), true},
		{"group_quota", refusal("rate", "group_quota", `"exports";r=0;t=37`), false},
		{"group_quota, refusing quota not told", refusal("rate", "group_quota", ""), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newVirtualClock()
			up := &script{clock: clk, replies: []reply{tenantOnly, grouped, tt.refusal, tenantOnly, tenantOnly, grouped}}
			c, _ := newClient(t, clk, client.Config{MaxWait: time.Minute})
			url := serve(t, up)
			get(context.Background(), c, url+"/items")
			post := func() error {
				resp, err := c.Post(url+"/exports", "application/json", nil)
				if err == nil {
					resp.Body.Close()
				}
				return err
			}
			post()
			if err := post(); !errors.Is(err, client.ErrNotRetryable) {
				t.Fatalf("refused export: %v, want a RejectedError, not retried", err)
			}
			get(context.Background(), c, url+"/items")
			get(context.Background(), c, url+"/never-seen")
			post()
			seen := up.arrivals()
			if len(seen) != 6 {
				t.Fatalf("%d requests reached the server, want 6", len(seen))
			}
			refused := seen[2].at
			for i, what := range map[int]string{3: "GET /items", 4: "GET /never-seen"} {
				after := seen[i].at.Sub(refused)
				// Not held, a GET is paced by the tenant's quota alone:
				// 480 tokens left for 1 s, a few milliseconds apart.
				if held := after >= 37*time.Second; held != tt.getsHeld || !held && after > 10*time.Millisecond {
					t.Errorf("%s sent %v after the 429; want held for its Retry-After: %v", what, after, tt.getsHeld)
				}
			}
			if after := seen[5].at.Sub(refused); after < 37*time.Second {
				t.Errorf("the next export sent %v after the 429, before its Retry-After", after)
			}
		})
	}
}

// TestPacingRouteNames names routes by the server's template: the exports
// group, learned on /exports/1, holds /exports/3 after /exports/2's 429.
// The control, routes named by their paths, sends /exports/3 at once: a
// path not seen yet is paced only by the quotas every response named.
func TestPacingRouteNames(t *testing.T) {
	const policy = `"tenant";q=500;w=5`
	tenantOnly := reply{status: 200, header: map[string]string{"RateLimit-Policy": policy, "RateLimit": `"tenant";r=480;t=1`}}
	grouped := reply{status: 200, header: map[string]string{"RateLimit-Policy": policy + `, "exports";q=40;w=20`, "RateLimit": `"exports";r=20;t=10`}}
	refused := rejection(http.StatusTooManyRequests, 37, "rate", "group_quota", "r")
	refused.header["RateLimit"] = `"exports";r=0;t=37`
	template := func(r *http.Request) string {
		if strings.HasPrefix(r.URL.Path, "/exports/") {
			return r.Method + " /exports/{id}"
		}
		return r.Method + " " + r.URL.Path
	}
	for _, named := range []bool{true, false} {
		clk := newVirtualClock()
		up := &script{clock: clk, replies: []reply{tenantOnly, grouped, refused, grouped}}
		cfg := client.Config{MaxWait: time.Minute}
		if named {
			cfg.Route = template
		}
		c, _ := newClient(t, clk, cfg)
		url := serve(t, up)
		get(context.Background(), c, url+"/items")
		for _, id := range []string{"1", "2", "3"} {
			if resp, err := c.Post(url+"/exports/"+id, "application/json", nil); err == nil {
				resp.Body.Close()
			}
		}
		seen := up.arrivals()
		after := seen[3].at.Sub(seen[2].at)
		if held := after >= 37*time.Second; held != named {
			t.Errorf("routes named by template %v: /exports/3 sent %v after /exports/2's 429", named, after)
		}
	}
}
