package client_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fairgate/fairgate/admission"
	"github.com/fairgate/fairgate/admission/gateway"
	"github.com/fairgate/fairgate/client"
	"github.com/fairgate/fairgate/deploy/examples"
	"github.com/fairgate/fairgate/tenant"
)

// These tests run the client against a real fairgate gateway in process:
// the demo config (tiers, routes, pools, adaptive limit, shedding) in
// front of an upstream that answers at once. A single caller talks to it
// over loopback with the gateway's buckets on the client's virtual clock;
// many concurrent callers run in a synctest bubble instead.

// startFairgate starts the gateway on loopback and returns its URL.
func startFairgate(t *testing.T, clk *virtualClock, mutate func(*gateway.Config)) string {
	t.Helper()
	up := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	cfg, err := gateway.Parse(examples.Demo)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Upstream = up
	if mutate != nil {
		mutate(&cfg)
	}
	gw, err := gateway.New(cfg, gateway.Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(gw.Handler())
	t.Cleanup(func() {
		srv.Close()
		gw.Close()
	})
	return srv.URL
}

// statusCounter is a Base transport that counts the attempts by status:
// what the gateway answered, retries included.
type statusCounter struct {
	base http.RoundTripper
	mu   sync.Mutex
	n    map[int]int
}

func (c *statusCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if err == nil {
		c.mu.Lock()
		if c.n == nil {
			c.n = map[int]int{}
		}
		c.n[resp.StatusCode]++
		c.mu.Unlock()
	}
	return resp, err
}

func (c *statusCounter) count(status int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[status]
}

// keyed sets an API key on every request.
type keyed struct {
	key  string
	next http.RoundTripper
}

func (k keyed) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+k.key)
	return k.next.RoundTrip(r)
}

// newFairgateClient returns a client for the tenant of key on clk and the
// counter of what the gateway answered it.
func newFairgateClient(t *testing.T, clk *virtualClock, key string, cfg client.Config) (*http.Client, *client.Transport, *statusCounter) {
	t.Helper()
	counter := &statusCounter{base: http.DefaultTransport}
	cfg.Base = counter
	c, tr := newClient(t, clk, cfg)
	c.Transport = keyed{key, tr}
	return c, tr, counter
}

// TestFairgatePacedClientAtThreeTimesQuota offers three times the starter
// tenant's quota (25 tokens, 5 a second) for a minute: a paced client gets
// only 200s and still uses its quota; the negative control, unpaced, runs
// into 429s.
func TestFairgatePacedClientAtThreeTimesQuota(t *testing.T) {
	const rate, dur = 5.0, 60 * time.Second
	for _, route := range []struct {
		path string
		cost float64
	}{{"/api/v1/users/me", 1}, {"/api/v1/search", 5}} {
		every := time.Duration(float64(time.Second) * route.cost / rate / 3)
		for _, paced := range []bool{true, false} {
			t.Run(pacedName(route.path, paced), func(t *testing.T) {
				clk := newVirtualClock()
				url := startFairgate(t, clk, nil)
				c, tr, seen := newFairgateClient(t, clk, "demo-starter-key", client.Config{DisablePacing: !paced})
				okN, failed := offer(t, c, clk, url, []string{route.path}, every, dur)
				ok, limited := seen.count(200), seen.count(429)
				t.Logf("%d ok, %d failed; gateway answered %d 200s, %d 429s; stats %+v", okN, failed, ok, limited, tr.Stats())
				judgePacing(t, paced, ok, limited, failed, float64(ok)*route.cost, rate*dur.Seconds())
			})
		}
	}
}

// TestFairgateRetriesOf503StayWithinBudget overloads the global backstop
// (2 tokens a second shared by everyone, 20 of burst: the routes cost up
// to 20) with 20 users of an enterprise tenant, well inside its own quota,
// each sending a request a second: most requests meet a 503. With the
// retry budget, retries stay within 10 % of the requests plus the
// per-second minimum, so the clients add little to the overload; the
// negative control without a budget retries most requests, up to twice.
//
// The users run concurrently, so this runs in a synctest bubble: the
// gateway and the client on the bubble's clock, connected in memory.
func TestFairgateRetriesOf503StayWithinBudget(t *testing.T) {
	const users, dur = 20, 60 * time.Second
	budget := client.BudgetConfig{Ratio: 0.1, MinPerSecond: 0.5, Window: 10 * time.Second}
	for _, disabled := range []bool{false, true} {
		name := "budget"
		if disabled {
			name = "no budget (control)"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg, err := gateway.Parse(examples.Demo)
				if err != nil {
					t.Fatal(err)
				}
				cfg.Upstream = "http://upstream.test"
				cfg.Admission.Global = &admission.GlobalConfig{Rate: 2, Burst: 20}
				ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
				gw, err := gateway.New(cfg, gateway.Options{Transport: handlerTransport{ok}})
				if err != nil {
					t.Fatal(err)
				}
				defer gw.Close()
				seen := &statusCounter{base: handlerTransport{gw.Handler()}}
				b := budget
				b.Disabled = disabled
				tr, err := client.New(client.Config{Base: seen, Budget: b, Rand: rand.NewPCG(1, 2)})
				if err != nil {
					t.Fatal(err)
				}
				c := &http.Client{Transport: keyed{"demo-enterprise-key", tr}}
				end := time.Now().Add(dur)
				var wg sync.WaitGroup
				for i := range users {
					wg.Go(func() {
						time.Sleep(time.Duration(i) * time.Second / users)
						for time.Now().Before(end) {
							next := time.Now().Add(time.Second)
							get(context.Background(), c, "http://fairgate.test/api/v1/users/me")
							time.Sleep(time.Until(next))
						}
					})
				}
				wg.Wait()

				st := tr.Stats()
				t.Logf("stats %+v; gateway answered %d 200s, %d 503s", st, seen.count(200), seen.count(503))
				if seen.count(503) < int(st.Requests)/2 {
					t.Fatalf("only %d 503s for %d requests: the backstop is not overloaded", seen.count(503), st.Requests)
				}
				bound := budget.Ratio*float64(st.Requests) + budget.MinPerSecond*(dur+budget.Window).Seconds()
				if disabled {
					if float64(st.Retries) <= 2*bound {
						t.Fatalf("without a budget only %d retries for %d requests: the control does not retry", st.Retries, st.Requests)
					}
					return
				}
				if float64(st.Retries) > bound {
					t.Fatalf("%d retries for %d requests: above the budget's %v", st.Retries, st.Requests, bound)
				}
				if st.BudgetDenied == 0 {
					t.Fatal("the budget refused nothing")
				}
			})
		})
	}
}

// TestFairgateRejectedError checks the typed error against the gateway's
// real rejection bodies: a POST (not retried) over the starter's quota.
func TestFairgateRejectedError(t *testing.T) {
	clk := newVirtualClock()
	url := startFairgate(t, clk, nil)
	c, _, _ := newFairgateClient(t, clk, "demo-starter-key", client.Config{DisablePacing: true})
	var err error
	for range 3 { // the export costs 20 of the starter's 25 tokens
		var resp *http.Response
		if resp, err = c.Post(url+"/api/v1/reports/export", "application/json", nil); err == nil {
			resp.Body.Close()
		}
	}
	rej := rejected(t, err)
	if rej.Status != 429 || rej.Code != "rate_limited" || rej.Layer != "rate" || rej.Reason != "tenant_quota" ||
		rej.RetryAfter < time.Second || len(rej.RequestID) != 16 || rej.Message == "" || !errors.Is(err, client.ErrNotRetryable) {
		t.Fatalf("%#v", rej)
	}
	// A GET retried after the Retry-After the gateway computed succeeds.
	if status, err := get(context.Background(), c, url+"/api/v1/users/me"); status != 200 {
		t.Fatalf("%d, %v", status, err)
	}
}

// fairgateInBubble returns the demo gateway with an exports group for the
// enterprise tier (20 tokens, 2 a second; the export costs 20), in front
// of an upstream that answers at once, for a synctest bubble: it reads
// the bubble's clock and is called in memory.
func fairgateInBubble(t *testing.T) http.Handler {
	t.Helper()
	cfg, err := gateway.Parse(examples.Demo)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Upstream = "http://upstream.test"
	tier := cfg.Tenants.Tiers["enterprise"]
	tier.Groups = map[string]tenant.Quota{"exports": {Rate: 2, Burst: 20}}
	cfg.Tenants.Tiers["enterprise"] = tier
	for i := range cfg.Admission.Routes {
		if r := &cfg.Admission.Routes[i]; r.Path == "/api/v1/reports/export" {
			r.Group = "exports"
		}
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	gw, err := gateway.New(cfg, gateway.Options{Transport: handlerTransport{ok}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gw.Close() })
	return gw.Handler()
}

// TestFairgateGroupPacesOnlyItsRoutes is TestPacingGroupPacesOnlyItsRoutes
// against the gateway: an enterprise tenant's GETs, ten a second, and its
// exports, offered at five times the exports group's quota. No GET waits;
// the exports meet at most the one 429 that teaches their cost.
func TestFairgateGroupPacesOnlyItsRoutes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const dur = 60 * time.Second
		seen := &statusCounter{base: handlerTransport{fairgateInBubble(t)}}
		tr, err := client.New(client.Config{Base: seen})
		if err != nil {
			t.Fatal(err)
		}
		c := &http.Client{Transport: keyed{"demo-enterprise-key", tr}}
		end := time.Now().Add(dur)
		getWaits, getFailed, exportFailed := getsBesideExports(t, c, "http://fairgate.test/api/v1/users/me", 100*time.Millisecond,
			"http://fairgate.test/api/v1/reports/export", 50*time.Millisecond, 2*time.Second, end)

		t.Logf("%d GETs, %d exports failed; gateway answered %d 200s, %d 429s; stats %+v", len(getWaits), exportFailed, seen.count(200), seen.count(429), tr.Stats())
		for i, w := range getWaits {
			if w != 0 {
				t.Fatalf("GET %d waited %v; want no GET to wait while the tenant has tokens", i, w)
			}
		}
		if getFailed != 0 || exportFailed > 1 || seen.count(429) != exportFailed {
			t.Fatalf("%d GETs and %d exports failed, %d 429s; want one failed export at most", getFailed, exportFailed, seen.count(429))
		}
		if exports := seen.count(200) - len(getWaits); float64(20*exports) < 0.9*2*dur.Seconds() {
			t.Fatalf("%d exports admitted: the group's pacing is too timid", exports)
		}
	})
}

// TestFairgateGroup429HoldsOnlyItsRoutes shares an enterprise key between
// two transports, as two processes would: one empties the exports group;
// the other, which had sent only GETs, sends an export and meets the
// gateway's 429 (group_quota, Retry-After about 10 s). Its GETs go on,
// paced by the tenant's quota alone; its next export waits for the
// Retry-After.
func TestFairgateGroup429HoldsOnlyItsRoutes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := fairgateInBubble(t)
		newKeyed := func() *http.Client {
			tr, err := client.New(client.Config{Base: handlerTransport{h}})
			if err != nil {
				t.Fatal(err)
			}
			return &http.Client{Transport: keyed{"demo-enterprise-key", tr}}
		}
		const base = "http://fairgate.test/api/v1"
		post := func(c *http.Client) error {
			resp, err := c.Post(base+"/reports/export", "application/json", nil)
			if err == nil {
				resp.Body.Close()
			}
			return err
		}
		a, b := newKeyed(), newKeyed()
		if status, err := get(context.Background(), b, base+"/users/me"); status != 200 {
			t.Fatalf("GET: %d, %v", status, err)
		}
		if err := post(a); err != nil {
			t.Fatalf("first export: %v", err)
		}
		err := post(b)
		rej := rejected(t, err)
		if rej.Reason != "group_quota" || rej.RetryAfter < 5*time.Second {
			t.Fatalf("second export: %v; want the group's 429 with a Retry-After of several seconds", err)
		}
		refused := time.Now()
		for range 5 {
			if status, err := get(context.Background(), b, base+"/users/me"); status != 200 {
				t.Fatalf("GET after the 429: %d, %v", status, err)
			}
		}
		if d := time.Since(refused); d > 100*time.Millisecond { // paced by the tenant's 500 tokens alone
			t.Fatalf("five GETs took %v after the group's 429; want none held", d)
		}
		if err := post(b); err != nil {
			t.Fatalf("export after the Retry-After: %v", err)
		}
		if d := time.Since(refused); d < rej.RetryAfter {
			t.Fatalf("the next export went %v after the 429, before its Retry-After %v", d, rej.RetryAfter)
		}
	})
}
