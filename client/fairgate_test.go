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
