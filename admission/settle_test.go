package admission

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/fakeclock"
)

// settledGate is a gate on a fake clock whose POST /v1/complete settles
// by X-Usage-Tokens (reserve 2, max 100) and whose POST /login costs 3 on
// a 401 alone; the starter tier's bucket is 25 tokens at 5 a second.
func settledGate(t *testing.T) (*Gate, *ratelimit.MemoryStore, *fakeclock.Clock) {
	t.Helper()
	routes := settledRoutes(t)
	clk := fakeclock.New()
	store := ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{Now: clk.Now})
	g, err := New(Config{Routes: routes}, testRegistry(t), Options{Now: clk.Now, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	return g, store, clk
}

// settledRoutes are the routes of settledGate.
func settledRoutes(t *testing.T) []RouteConfig {
	t.Helper()
	var routes []RouteConfig
	if err := yaml.Unmarshal([]byte(`
- {method: POST, path: /v1/complete, settle: {from: header, name: x-usage-tokens, reserve: 2, max: 100}}
- {method: POST, path: /v1/stream, settle: {from: trailer, name: X-Usage-Tokens, reserve: 2}}
- {method: POST, path: /login, cost: 3, charge_on_status: [401, 403]}
`), &routes); err != nil {
		t.Fatal(err)
	}
	return routes
}

// serve sends one request of start-key to path through g's middleware, to
// a handler that answers status with the headers (and trailers) given.
func serve(g *Gate, path string, status int, header, trailer map[string]string) *httptest.ResponseRecorder {
	h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, v := range header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(status)
		w.Write([]byte("data: done\n\n"))
		for k, v := range trailer {
			w.Header().Set(http.TrailerPrefix+k, v)
		}
	}))
	w := httptest.NewRecorder()
	r := httptest.NewRequest("POST", path, strings.NewReader(""))
	r.Header.Set("X-API-Key", "start-key")
	h.ServeHTTP(w, r)
	return w
}

func tenantTokens(s *ratelimit.MemoryStore) float64 {
	return s.Tokens(ratelimit.BucketKey{Tenant: "initech"}, ratelimit.Limit{Rate: 5, Burst: 25})
}

// TestSettleChargesWhatWasUsed: the reserve is taken at admission and the
// upstream's usage settled once it answered, from a header or a trailer;
// an answer without it is charged the reserve; max bounds the charge.
func TestSettleChargesWhatWasUsed(t *testing.T) {
	for _, tc := range []struct {
		name            string
		path            string
		header, trailer map[string]string
		want            float64
	}{
		{"header", "/v1/complete", map[string]string{"X-Usage-Tokens": "12"}, nil, 25 - 12},
		{"header below the reserve", "/v1/complete", map[string]string{"X-Usage-Tokens": "0.5"}, nil, 25 - 0.5},
		{"trailer", "/v1/stream", nil, map[string]string{"X-Usage-Tokens": "7"}, 25 - 7},
		{"no usage: the reserve", "/v1/complete", nil, nil, 25 - 2},
		{"unparsable usage: the reserve", "/v1/complete", map[string]string{"X-Usage-Tokens": "lots"}, nil, 25 - 2},
		{"a header for a trailer route is read too", "/v1/stream", map[string]string{"X-Usage-Tokens": "9"}, nil, 25 - 9},
		{"a number too large for a float: max", "/v1/complete", map[string]string{"X-Usage-Tokens": "1e400"}, nil, 25 - 25},
		{"Inf is no usage: the reserve", "/v1/complete", map[string]string{"X-Usage-Tokens": "Inf"}, nil, 25 - 2},
		{"NaN is no usage: the reserve", "/v1/complete", map[string]string{"X-Usage-Tokens": "NaN"}, nil, 25 - 2},
		{"hexadecimal is no usage: the reserve", "/v1/complete", map[string]string{"X-Usage-Tokens": "0x10"}, nil, 25 - 2},
		{"negative is no usage: the reserve", "/v1/complete", map[string]string{"X-Usage-Tokens": "-3"}, nil, 25 - 2},
		{"an exponent", "/v1/complete", map[string]string{"X-Usage-Tokens": " 1.5e1 "}, nil, 25 - 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, store, _ := settledGate(t)
			if w := serve(g, tc.path, http.StatusOK, tc.header, tc.trailer); w.Code != http.StatusOK {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			if got := tenantTokens(store); math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("the tenant's bucket holds %v after settling, want %v", got, tc.want)
			}
		})
	}
}

// TestSettleDebt: a request that used more than its bucket held takes it
// into debt, at most the burst (max bounds one request's charge first),
// and the tenant is refused until the refill has repaid it, with a
// Retry-After that says when.
func TestSettleDebt(t *testing.T) {
	g, store, clk := settledGate(t)
	serve(g, "/v1/complete", http.StatusOK, map[string]string{"X-Usage-Tokens": "5000"}, nil)
	// Charged max (100) of a 25-token bucket: 25 − 100, held at −25; a
	// bucket in debt shows no tokens.
	if got := tenantTokens(store); got != 0 {
		t.Fatalf("after a request of 5000 (max 100): %v tokens, want none", got)
	}
	w := serve(g, "/v1/complete", http.StatusOK, nil, nil)
	// The reserve of 2 needs 27 tokens of refill at 5 a second: 5.4 s
	// (without the floor at −25, a debt of 75 would take 15.4 s).
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "6" {
		t.Fatalf("in debt: %d, Retry-After %q; want 429 after 6 s", w.Code, w.Header().Get("Retry-After"))
	}
	clk.Advance(5400 * time.Millisecond)
	if w := serve(g, "/v1/complete", http.StatusOK, map[string]string{"X-Usage-Tokens": "1"}, nil); w.Code != http.StatusOK {
		t.Fatalf("debt repaid: %d, want 200", w.Code)
	}
}

// TestChargeOnStatus: a login is charged on a 401 or 403 alone, so a
// credential-stuffing client runs out of attempts and a user who logs in
// does not.
func TestChargeOnStatus(t *testing.T) {
	g, store, _ := settledGate(t)
	for range 20 {
		if w := serve(g, "/login", http.StatusOK, nil, nil); w.Code != http.StatusOK {
			t.Fatalf("a successful login refused: %d", w.Code)
		}
	}
	if got := tenantTokens(store); got != 25 {
		t.Fatalf("20 successful logins left %v tokens, want 25 (each refunded)", got)
	}
	codes := map[int]int{}
	for range 10 {
		codes[serve(g, "/login", http.StatusUnauthorized, nil, nil).Code]++
	}
	// 25 tokens at 3 a failure: 8 failures, then refused.
	if codes[http.StatusUnauthorized] != 8 || codes[http.StatusTooManyRequests] != 2 {
		t.Fatalf("10 failed logins: %v, want 8 answered and 2 refused", codes)
	}
}

// TestSettleConfigErrors: what compile refuses of settle names the field.
func TestSettleConfigErrors(t *testing.T) {
	for _, tc := range []struct{ route, want string }{
		{`{method: POST, path: /c, settle: {from: body, name: X-U, reserve: 2}}`, `routes[0].settle.from: must be header or trailer, got "body"`},
		{`{method: POST, path: /c, settle: {from: header, name: "X U", reserve: 2}}`, `routes[0].settle.name: must be a header field's name`},
		{`{method: POST, path: /c, cost: 3, settle: {from: header, name: X-U, reserve: 2}}`, `routes[0].cost: a settled route takes settle.reserve at admission: delete cost`},
		{`{method: POST, path: /c, settle: {from: header, name: X-U}}`, `routes[0].settle.reserve: must be >= 1`},
		{`{method: POST, path: /c, settle: {from: header, name: X-U, reserve: 5, max: 2}}`, `routes[0].settle.max: must be at least settle.reserve (5)`},
		{`{method: POST, path: /c, auth: none, charge_on_status: [401]}`, `routes[0]: a route with auth: none charges no tenant`},
		{`{method: POST, path: /c, charge_on_status: []}`, `routes[0].charge_on_status: empty`},
	} {
		var rc RouteConfig
		if err := yaml.Unmarshal([]byte(tc.route), &rc); err != nil {
			t.Fatalf("%s: %v", tc.route, err)
		}
		_, err := New(Config{Routes: []RouteConfig{rc}}, testRegistry(t), Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.route, err, tc.want)
		}
	}
	var rc RouteConfig
	if err := yaml.Unmarshal([]byte(`{method: POST, path: /c, charge_on_status: [401, 99]}`), &rc); err == nil || !strings.Contains(err.Error(), `"99" is not a status`) {
		t.Errorf("a status of 99: %v", err)
	}
}

// TestChargeOnStatusUnknown: an answer whose status the caller did not
// say (Lease.Answered) is charged, as a matching one: a refund is for an
// outcome known not to be charged.
func TestChargeOnStatusUnknown(t *testing.T) {
	g, store, _ := settledGate(t)
	for range 3 {
		h := http.Header{}
		h.Set("X-API-Key", "start-key")
		d, err := g.Check(context.Background(), Request{Method: "POST", Path: "/login", Header: h})
		if err != nil || !d.Allowed {
			t.Fatalf("refused: %v %+v", err, d)
		}
		l := d.Lease()
		l.StartUpstream(context.Background())
		l.Answered()
		l.Release()
	}
	if got := tenantTokens(store); got != 25-9 {
		t.Fatalf("3 logins answered with no status: %v tokens, want 16 (each charged 3)", got)
	}
}

// TestGRPCOutcome: a gRPC answer is charged by its grpc-status, mapped to
// HTTP's, wherever it came (a trailer, the head of a trailers-only
// answer); a stream without one is unknown.
func TestGRPCOutcome(t *testing.T) {
	for _, tc := range []struct {
		h      http.Header
		status int
		want   int
	}{
		{http.Header{"Content-Type": {"application/grpc"}, "Grpc-Status": {"5"}}, 200, 404},
		{http.Header{"Content-Type": {"application/grpc+proto"}, http.TrailerPrefix + "Grpc-Status": {"16"}}, 200, 401},
		{http.Header{"Content-Type": {"application/grpc"}, "Grpc-Status": {"0"}}, 200, 200},
		{http.Header{"Content-Type": {"application/grpc"}}, 200, 0},
		{http.Header{"Content-Type": {"application/grpc"}, "Grpc-Status": {"17"}}, 200, 0},
		{http.Header{"Content-Type": {"application/json"}, "Grpc-Status": {"5"}}, 200, 200},
		{http.Header{"Content-Type": {"application/grpc"}}, 502, 502},
	} {
		if got := grpcOutcome(tc.h, tc.status); got != tc.want {
			t.Errorf("%v, status %d: %d, want %d", tc.h, tc.status, got, tc.want)
		}
	}
}

// TestSettleInFlightChargedInFull: requests admitted together, each
// within the burst, are each charged what they used, though together
// they take the bucket deeper than one burst: a burst of debt bounds one
// settlement, never what requests in flight together used.
func TestSettleInFlightChargedInFull(t *testing.T) {
	g, _, _ := settledGate(t)
	var leases []*Lease
	for range 12 { // 12 reserves of 2: 1 token of 25 left
		h := http.Header{}
		h.Set("X-API-Key", "start-key")
		d, err := g.Check(context.Background(), Request{Method: "POST", Path: "/v1/complete", Header: h})
		if err != nil || !d.Allowed {
			t.Fatalf("refused: %v %+v", err, d)
		}
		leases = append(leases, d.Lease())
	}
	for _, l := range leases {
		l.StartUpstream(context.Background())
		l.AnsweredStatus(http.StatusOK)
		l.ReportUsage("20")
		l.Release()
	}
	// 25 − 12 × 20 = −215: a reserve of 2 fits after 217 tokens of
	// refill at 5 a second, 43.4 s.
	w := serve(g, "/v1/complete", http.StatusOK, nil, nil)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "44" {
		t.Fatalf("after 12 requests of 20 in flight together: %d, Retry-After %q; want 429 after 44 s (each charged in full)", w.Code, w.Header().Get("Retry-After"))
	}
}

// unsettledBackstop is a store whose backstop is never settled: the
// negative control of TestSettleBackstopByUsage, the backstop then
// counting each request's reserve as all it used.
type unsettledBackstop struct{ *ratelimit.MemoryStore }

func (unsettledBackstop) SettleBackstop(context.Context, ratelimit.BackstopLimit, string, float64) error {
	return nil
}

// TestSettleBackstopByUsage: the global backstop counts what settled
// requests used, not what they reserved. A tenant whose requests reserve
// 2 tokens and use 100 is held, with everyone else, to the backstop's
// rate of what was used, while a light tenant within its share keeps 99%
// of its requests once the heavy tenant's rate shows its flood; with the backstop
// counting reserves (the negative control), the heavy tenant is admitted
// many times what the backstop allows.
func TestSettleBackstopByUsage(t *testing.T) {
	used := func(t *testing.T, wrap func(*ratelimit.MemoryStore) ratelimit.Store) (heavy, light float64, lightRefused int) {
		clk := fakeclock.New()
		mem := ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{Now: clk.Now})
		tc := testTenants(1e6)
		for name, tier := range tc.Tiers {
			tier.Rate, tier.Burst, tier.Groups = 1e6, 1e6, nil // only the backstop binds
			tc.Tiers[name] = tier
		}
		g, err := New(Config{Routes: settledRoutes(t), Global: &GlobalConfig{Rate: 100, Burst: 200, Window: 10 * time.Second}},
			testRegistryOf(t, tc), Options{Now: clk.Now, Store: wrap(mem)})
		if err != nil {
			t.Fatal(err)
		}
		send := func(key, usage string) bool {
			h := http.Header{}
			h.Set("X-API-Key", key)
			d, err := g.Check(context.Background(), Request{Method: "POST", Path: "/v1/complete", Header: h})
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				return false
			}
			l := d.Lease()
			l.StartUpstream(context.Background())
			l.AnsweredStatus(http.StatusOK)
			l.ReportUsage(usage)
			l.Release()
			return true
		}
		// 30 s: the heavy tenant asks every 10 ms (10,000 tokens a
		// second of use), the light one every 50 ms (40 a second).
		for step := range 3000 {
			clk.Advance(10 * time.Millisecond)
			if send("start-key", "100") {
				heavy += 100
			}
			if step%5 == 0 {
				if send("ent-key", "2") {
					light += 2
				} else if step >= 1000 {
					// After the first window: until the heavy tenant's
					// rate shows its flood it is within its share, and
					// may use the reserve as any tenant may.
					lightRefused++
				}
			}
		}
		return heavy, light, lightRefused
	}
	heavy, light, refused := used(t, func(m *ratelimit.MemoryStore) ratelimit.Store { return m })
	t.Logf("settled: heavy used %v, light %v (%d refused) in 30 s of a backstop of 100 a second", heavy, light, refused)
	// The backstop admits its rate and burst, 100 × 30 + 200, and its
	// reserve, another 200, to tenants within their shares.
	// After the first window the light tenant sends 400: it keeps 99%.
	if heavy+light > 3400 || refused > 4 {
		t.Fatalf("settled at the backstop: heavy used %v, light %v, light refused %d; want together within 3400 and light refused at most 4 of 400 after the first window", heavy, light, refused)
	}
	heavyC, lightC, refusedC := used(t, func(m *ratelimit.MemoryStore) ratelimit.Store { return unsettledBackstop{m} })
	t.Logf("negative control: heavy used %v, light %v (%d refused)", heavyC, lightC, refusedC)
	if heavyC < 10*heavy {
		t.Fatalf("the negative control's heavy tenant used %v, the settled one's %v: the test cannot tell them apart", heavyC, heavy)
	}
}

// TestSettleLearnedReserve: with settle.learn a tenant's requests reserve
// what its requests of the route have used lately, within the route's
// reserve and every bucket's burst; without it (the control), always the
// route's reserve.
func TestSettleLearnedReserve(t *testing.T) {
	for _, learn := range []bool{true, false} {
		t.Run(fmt.Sprint("learn=", learn), func(t *testing.T) {
			var rc RouteConfig
			if err := yaml.Unmarshal([]byte(fmt.Sprintf(`{method: POST, path: /v1/complete, settle: {from: header, name: X-Usage-Tokens, reserve: 2, max: 100, learn: %v}}`, learn)), &rc); err != nil {
				t.Fatal(err)
			}
			clk := fakeclock.New()
			store := ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{Now: clk.Now})
			g, err := New(Config{Routes: []RouteConfig{rc}}, testRegistry(t), Options{Now: clk.Now, Store: store})
			if err != nil {
				t.Fatal(err)
			}
			// Each request finds the bucket full (25): what admission
			// left shows what it reserved.
			var left []float64
			for _, used := range []string{"20", "20", "500", "4"} {
				clk.Advance(10 * time.Second)
				h := http.Header{}
				h.Set("X-API-Key", "start-key")
				d, err := g.Check(context.Background(), Request{Method: "POST", Path: "/v1/complete", Header: h})
				if err != nil || !d.Allowed {
					t.Fatalf("refused: %v %+v", err, d)
				}
				left = append(left, d.Quotas[0].Remaining)
				l := d.Lease()
				l.StartUpstream(context.Background())
				l.AnsweredStatus(http.StatusOK)
				l.ReportUsage(used)
				l.Release()
			}
			// Learned: 2 before any usage; then 20, twice; then the
			// mean moves to 20 + 0.1 × (100 − 20) = 28 (500 charged
			// max), above the burst: 25.
			want := []float64{23, 5, 5, 0}
			if !learn {
				want = []float64{23, 23, 23, 23}
			}
			for i := range want {
				if math.Abs(left[i]-want[i]) > 1e-9 {
					t.Fatalf("left after each admission: %v, want %v", left, want)
				}
			}
		})
	}
}
