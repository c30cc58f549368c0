package admission

import (
	"context"
	"github.com/fairgate/fairgate/admission/ratelimit"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/bulkhead"
	"github.com/fairgate/fairgate/internal/fakeclock"
	"github.com/fairgate/fairgate/shed"
	"github.com/fairgate/fairgate/tenant"
)

func testRegistry(t testing.TB) *tenant.Registry { return testRegistryStarterRate(t, 5) }

// testRegistryStarterRate is testRegistry with the starter tier's rate.
func testRegistryStarterRate(t testing.TB, starterRate float64) *tenant.Registry {
	t.Helper()
	return testRegistryOf(t, testTenants(starterRate))
}

// testRegistryOf builds the registry of tenant config c.
func testRegistryOf(t testing.TB, c tenant.Config) *tenant.Registry {
	t.Helper()
	reg, err := tenant.NewRegistry(c)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// testTenants is testRegistry's tenant config, with the starter tier's
// rate: acme (enterprise, key ent-key) and initech (starter, start-key).
func testTenants(starterRate float64) tenant.Config {
	return tenant.Config{
		Tiers: map[string]tenant.TierConfig{
			"enterprise": {Rate: 100, Burst: 500},
			"starter": {Rate: starterRate, Burst: 25, Groups: map[string]tenant.Quota{
				"exports": {Rate: 0.5, Burst: 40},
			}},
		},
		Tenants: []tenant.TenantConfig{
			{ID: "acme", Tier: "enterprise", APIKeysSHA256: []string{tenant.HashKey("ent-key")}},
			{ID: "initech", Tier: "starter", APIKeysSHA256: []string{tenant.HashKey("start-key")}},
		},
	}
}

func testConfig() Config {
	return Config{Routes: []RouteConfig{
		{Method: "GET", Path: "/api/v1/users/me", Cost: 1},
		{Method: "GET", Path: "/api/v1/search", Cost: 5},
		{Method: "POST", Path: "/api/v1/reports/export", Cost: 20, Group: "exports"},
	}}
}

func req(key, method, path string) Request {
	h := http.Header{}
	if key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
	return Request{Method: method, Path: path, Header: h, RemoteAddr: "192.0.2.7:5555"}
}

func mustCheck(t *testing.T, g *Gate, r Request) Decision {
	t.Helper()
	d, err := g.Check(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if d.Allowed {
		d.Lease().Release()
	}
	return d
}

func TestGateRateLayer(t *testing.T) {
	clk := fakeclock.New()
	g, err := New(testConfig(), testRegistry(t), Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	// The starter's burst of 25 allows five searches (cost 5), then 429.
	for i := range 5 {
		if d := mustCheck(t, g, req("start-key", "GET", "/api/v1/search")); !d.Allowed {
			t.Fatalf("search %d rejected: %+v", i, d)
		}
	}
	d := mustCheck(t, g, req("start-key", "GET", "/api/v1/search"))
	if d.Allowed || d.Status != 429 || d.Layer != LayerRate || d.Reason != ReasonTenantQuota {
		t.Fatalf("6th search: %+v, want 429 from rate", d)
	}
	if d.RetryAfter != time.Second { // 5 tokens at 5/s
		t.Fatalf("RetryAfter = %v, want 1s", d.RetryAfter)
	}
	// The enterprise tenant is unaffected at the same instant.
	if d := mustCheck(t, g, req("ent-key", "GET", "/api/v1/search")); !d.Allowed {
		t.Fatalf("enterprise rejected: %+v", d)
	}
	// One second later the bucket holds 5 tokens again: one search.
	clk.Advance(time.Second)
	if d := mustCheck(t, g, req("start-key", "GET", "/api/v1/search")); !d.Allowed {
		t.Fatalf("after refill: %+v", d)
	}
	if d := mustCheck(t, g, req("start-key", "GET", "/api/v1/users/me")); d.Allowed {
		t.Fatalf("bucket should be empty: %+v", d)
	}
}

func TestGateRouteGroup(t *testing.T) {
	clk := fakeclock.New()
	g, err := New(testConfig(), testRegistry(t), Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	// An export costs 20: the group's burst of 40 allows two, but the
	// tenant's burst of 25 allows only one.
	if d := mustCheck(t, g, req("start-key", "POST", "/api/v1/reports/export")); !d.Allowed || d.NQuotas != 2 {
		t.Fatalf("first export: %+v", d)
	}
	d := mustCheck(t, g, req("start-key", "POST", "/api/v1/reports/export"))
	if d.Allowed || d.Reason != ReasonTenantQuota {
		t.Fatalf("second export: %+v, want tenant_quota", d)
	}
	// The refused export took nothing from the group (all or nothing),
	// so ten seconds later both buckets hold an export's cost again.
	clk.Advance(10 * time.Second)
	if d := mustCheck(t, g, req("start-key", "POST", "/api/v1/reports/export")); !d.Allowed {
		t.Fatalf("third export: %+v, want admitted", d)
	}
	// Ten more seconds: the tenant is full again, the group holds 10.
	clk.Advance(10 * time.Second)
	d = mustCheck(t, g, req("start-key", "POST", "/api/v1/reports/export"))
	if d.Allowed || d.Reason != ReasonGroupQuota || d.RetryAfter != 20*time.Second {
		t.Fatalf("fourth export: %+v, want group_quota, retry after 20s", d)
	}
	// Both buckets were read in the one call: the headers report both.
	if d.NQuotas != 2 || d.Quotas[1].Name != "exports" || d.Quotas[1].Remaining != 10 || d.Quotas[0].Remaining != 25 {
		t.Fatalf("quotas reported on a group rejection: %d %+v", d.NQuotas, d.Quotas)
	}
}

// firstComeStore keeps the global backstop as the single first-come bucket
// fairgate had before: the negative control of the backstop tests.
type firstComeStore struct{ *ratelimit.MemoryStore }

func (f firstComeStore) TakeBackstop(ctx context.Context, l ratelimit.BackstopLimit, br ratelimit.BackstopRequest) (ratelimit.BackstopResult, error) {
	r, err := f.Take(ctx, ratelimit.BucketKey{}, ratelimit.Limit{Rate: l.Rate, Burst: l.Burst}, br.Cost)
	return ratelimit.BackstopResult{Allowed: r.Allowed, RetryAfter: r.RetryAfter, Tokens: r.Remaining}, err
}

// backstopSqueeze runs deploy/examples/demo.yaml's situation on store for
// 60 s of fake time: the enterprise tenant sends its own quota (100
// tokens/s, the whole global rate) from the 10th second, the pro and
// starter tenants exactly theirs (20 and 5 tokens/s in cost-5 searches).
// It returns the share of each tenant's requests admitted.
func backstopSqueeze(t *testing.T, clk *fakeclock.Clock, store ratelimit.Store) map[string]float64 {
	t.Helper()
	reg, err := tenant.NewRegistry(tenant.Config{
		Tiers: map[string]tenant.TierConfig{
			"enterprise": {Rate: 100, Burst: 500},
			"pro":        {Rate: 20, Burst: 100},
			"starter":    {Rate: 5, Burst: 25},
		},
		Tenants: []tenant.TenantConfig{
			{ID: "acme", Tier: "enterprise", APIKeysSHA256: []string{tenant.HashKey("ent-key")}},
			{ID: "globex", Tier: "pro", APIKeysSHA256: []string{tenant.HashKey("pro-key")}},
			{ID: "initech", Tier: "starter", APIKeysSHA256: []string{tenant.HashKey("start-key")}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Routes = cfg.Routes[:2]
	cfg.Global = &GlobalConfig{Rate: 100, Burst: 600}
	g, err := New(cfg, reg, Options{Now: clk.Now, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	sent, ok := map[string]int{}, map[string]int{}
	send := func(id, key, path string) {
		d := mustCheck(t, g, req(key, "GET", path))
		sent[id]++
		if d.Allowed {
			ok[id]++
		} else if d.Status != 503 || d.Reason != ReasonGlobalBackstop || d.RetryAfter <= 0 {
			t.Fatalf("%s: %+v", id, d)
		}
	}
	for ms := range 60_000 {
		if ms >= 10_000 && ms%10 == 0 {
			send("acme", "ent-key", "/api/v1/users/me") // 100 a second, cost 1
		}
		if ms%250 == 0 {
			send("globex", "pro-key", "/api/v1/search") // 4 a second, cost 5
		}
		if ms%1000 == 500 {
			send("initech", "start-key", "/api/v1/search") // 1 a second, cost 5
		}
		clk.Advance(time.Millisecond)
	}
	share := map[string]float64{}
	for id, n := range sent {
		share[id] = float64(ok[id]) / float64(n)
	}
	return share
}

// Issue 11's first situation: a tenant inside its own quota but above the
// global rate must not get the light tenants 503s.
func TestGateGlobalBackstopIsFair(t *testing.T) {
	clk := fakeclock.New()
	share := backstopSqueeze(t, clk, ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{Now: clk.Now}))
	for _, id := range []string{"globex", "initech"} {
		if share[id] < 0.99 {
			t.Errorf("%s admitted %.1f%%, want ≥ 99%% (within its share)", id, 100*share[id])
		}
	}
	// acme takes what they leave: 75 of its 100 tokens a second, and the
	// backstop's burst and reserve (1200 tokens) at the start.
	if share["acme"] < 0.70 || share["acme"] > 0.75+1200.0/5000 {
		t.Errorf("acme admitted %.1f%%, want about 75%% and at most 99%%", 100*share["acme"])
	}
}

// Negative control: the first-come backstop gives the light tenants 503s.
func TestGateGlobalBackstopFirstComeFails(t *testing.T) {
	clk := fakeclock.New()
	share := backstopSqueeze(t, clk, firstComeStore{ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{Now: clk.Now})})
	if share["initech"] >= 0.99 && share["globex"] >= 0.99 {
		t.Errorf("first-come backstop: globex %.1f%%, initech %.1f%%; the fairness check cannot fail", 100*share["globex"], 100*share["initech"])
	}
}

func TestGateUnauthenticated(t *testing.T) {
	clk := fakeclock.New()
	g, err := New(testConfig(), testRegistry(t), Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if d := mustCheck(t, g, req("", "GET", "/x")); d.Status != 401 || d.Reason != ReasonMissingKey {
		t.Fatalf("no key: %+v", d)
	}
	for range 9 {
		if d := mustCheck(t, g, req("guess", "GET", "/x")); d.Status != 401 || d.Reason != ReasonUnknownKey {
			t.Fatalf("bad key: %+v", d)
		}
	}
	d := mustCheck(t, g, req("guess", "GET", "/x"))
	if d.Status != 429 || d.Layer != LayerIdentify || d.RetryAfter != time.Second {
		t.Fatalf("11th failed attempt: %+v, want 429 after 1s", d)
	}
	// A valid key from the same address still works.
	if d := mustCheck(t, g, req("ent-key", "GET", "/api/v1/users/me")); !d.Allowed {
		t.Fatalf("valid key from a guessing IP: %+v", d)
	}
}

func TestGateReloadKeepsBuckets(t *testing.T) {
	clk := fakeclock.New()
	g, err := New(testConfig(), testRegistry(t), Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		mustCheck(t, g, req("start-key", "GET", "/api/v1/search"))
	}
	bad := testConfig()
	bad.Routes[0].Cost = 1000 // above every burst
	if err := g.Reload(context.Background(), bad, testRegistry(t)); err == nil || !strings.Contains(err.Error(), "routes[0].cost") {
		t.Fatalf("Reload(bad) = %v, want a routes[0].cost error", err)
	}
	if d := mustCheck(t, g, req("start-key", "GET", "/api/v1/users/me")); d.Allowed {
		t.Fatal("a failed reload reset the bucket")
	}
	if err := g.Reload(context.Background(), testConfig(), testRegistry(t)); err != nil {
		t.Fatal(err)
	}
	if d := mustCheck(t, g, req("start-key", "GET", "/api/v1/users/me")); d.Allowed {
		t.Fatal("a reload reset the bucket")
	}
}

func TestMiddlewareContract(t *testing.T) {
	clk := fakeclock.New()
	g, err := New(testConfig(), testRegistry(t), Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int32
	var gotTenant string
	h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		gotTenant = r.Header.Get(HeaderTenantID)
		if v := r.Header["X_tenant_id"]; v != nil {
			t.Errorf("X_tenant_id reached the handler: %v", v)
		}
		w.WriteHeader(204)
	}))
	do := func(key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/api/v1/search", nil)
		r.Header.Set("X-API-Key", key)
		r.Header.Set("X-Tenant-Id", "acme")
		r.Header["X_tenant_id"] = []string{"acme"}
		r.Header.Set("RateLimit-Remaining", "9999")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	w := do("start-key")
	if w.Code != 204 || gotTenant != "initech" {
		t.Fatalf("admitted: %d tenant %q", w.Code, gotTenant)
	}
	if got, want := w.Header().Get("RateLimit-Policy"), `"tenant";q=25;w=5`; got != want {
		t.Fatalf("RateLimit-Policy = %q, want %q", got, want)
	}
	if got, want := w.Header().Get("RateLimit"), `"tenant";r=20;t=1`; got != want {
		t.Fatalf("RateLimit = %q, want %q", got, want)
	}
	for range 4 {
		do("start-key")
	}
	w = do("start-key")
	if w.Code != 429 || w.Header().Get("Retry-After") != "1" || w.Header().Get("RateLimit-Remaining") != "0" {
		t.Fatalf("rejected: %d %v", w.Code, w.Header())
	}
	if !strings.Contains(w.Body.String(), `"layer":"rate"`) || !strings.Contains(w.Body.String(), `"error":"rate_limited"`) {
		t.Fatalf("body %s", w.Body)
	}
	if seen.Load() != 5 {
		t.Fatalf("handler saw %d requests, want 5", seen.Load())
	}
}

// benchRegistry has quotas high enough that every benchmarked check is
// admitted: the full path.
func benchRegistry(b testing.TB) *tenant.Registry {
	reg, err := tenant.NewRegistry(tenant.Config{
		Tiers:   map[string]tenant.TierConfig{"enterprise": {Rate: 1e9, Burst: 1e12, Groups: map[string]tenant.Quota{"exports": {Rate: 1e9, Burst: 1e12}}}},
		Tenants: []tenant.TenantConfig{{ID: "acme", Tier: "enterprise", APIKeysSHA256: []string{tenant.HashKey("ent-key")}}},
	})
	if err != nil {
		b.Fatal(err)
	}
	return reg
}

func BenchmarkGateCheck(b *testing.B) {
	benchCheck(context.Background(), b, Options{})
}

func BenchmarkMiddleware(b *testing.B) {
	g, err := New(testConfig(), benchRegistry(b), Options{})
	if err != nil {
		b.Fatal(err)
	}
	h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := httptest.NewRequest("GET", "/api/v1/users/me", nil)
		for pb.Next() {
			r.Header = http.Header{"Authorization": {"Bearer ent-key"}}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
		}
	})
}

// TestMiddlewarePanic: a panicking handler behind the embedded middleware
// gets that request a 500; its concurrency slot is released and the next
// request is admitted.
func TestMiddlewarePanic(t *testing.T) {
	reg, err := tenant.NewRegistry(tenant.Config{
		Tiers:   map[string]tenant.TierConfig{"t": {Rate: 100, Burst: 100, MaxConcurrent: 1}},
		Tenants: []tenant.TenantConfig{{ID: "acme", Tier: "t", APIKeysSHA256: []string{tenant.HashKey("k")}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Config{}, reg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	boom := true
	h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if boom {
			panic("bug in the service")
		}
		w.WriteHeader(204)
	}))
	serve := func() int {
		r := httptest.NewRequest("GET", "/x", nil)
		r.Header.Set("X-API-Key", "k")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if got := serve(); got != 500 {
		t.Fatalf("panicking handler: %d, want 500", got)
	}
	if st, _ := g.TenantState("acme"); st.InFlight != 0 {
		t.Fatalf("in flight after the panic: %d", st.InFlight)
	}
	boom = false
	if got := serve(); got != 204 {
		t.Fatalf("next request: %d, want 204 (the cap of 1 must be free again)", got)
	}
}

// TestTrustedPriority: X-Fairgate-Priority counts only from a network in
// trusted_priority_from, and only as a whole number in 0–499; from anywhere
// else the priority is the tier's and route's, and the header never reaches
// the handler.
func TestTrustedPriority(t *testing.T) {
	cfg := testConfig()
	cfg.TrustedPriorityFrom = []string{"10.1.0.0/16"}
	g, err := New(cfg, testRegistry(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got Decision
	var leaked string
	h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, _ := FromContext(r.Context())
		got = *d
		leaked = r.Header.Get(HeaderPriority)
	}))
	def := shed.PriorityFor(0, shed.Default) // rank-0 tier, search route
	for _, tt := range []struct {
		remote, header string
		want           shed.Priority
	}{
		{"10.1.2.3:4000", "450", 450},
		{"10.1.2.3:4000", "0", 0},
		{"10.1.2.3:4000", "500", def},
		{"10.1.2.3:4000", "high", def},
		{"10.2.0.1:4000", "450", def},
		{"[::ffff:10.1.0.9]:4000", "7", 7},
		{"192.0.2.1:4000", "", def},
	} {
		r := httptest.NewRequest("GET", "/api/v1/search", nil)
		r.RemoteAddr = tt.remote
		r.Header.Set("X-API-Key", "ent-key")
		got = Decision{Priority: -1}
		if tt.header != "" {
			r.Header.Set(HeaderPriority, tt.header)
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		if got.Priority != tt.want {
			t.Errorf("from %s with %q: priority %d, want %d", tt.remote, tt.header, got.Priority, tt.want)
		}
		if leaked != "" {
			t.Errorf("the handler saw %s: %q", HeaderPriority, leaked)
		}
	}
	bad := testConfig()
	bad.TrustedPriorityFrom = []string{"10.1.0.0"}
	if _, err := New(bad, testRegistry(t), Options{}); err == nil || !strings.Contains(err.Error(), "trusted_priority_from[0]") {
		t.Fatalf("a bad CIDR: %v", err)
	}
}

// BenchmarkGateCheckAllLayers is BenchmarkGateCheck with every layer on:
// a concurrency cap, a bulkhead pool, shedding and the adaptive limit, all
// sized so that every check is admitted. The difference between the two is
// the cost of the later layers.
func BenchmarkGateCheckAllLayers(b *testing.B) {
	reg, err := tenant.NewRegistry(tenant.Config{
		Tiers:   map[string]tenant.TierConfig{"enterprise": {Rate: 1e9, Burst: 1e12, MaxConcurrent: 1 << 20}},
		Tenants: []tenant.TenantConfig{{ID: "acme", Tier: "enterprise", APIKeysSHA256: []string{tenant.HashKey("ent-key")}}},
	})
	if err != nil {
		b.Fatal(err)
	}
	cfg := Config{Routes: []RouteConfig{{Method: "GET", Path: "/api/v1/users/me", Cost: 1}},
		Bulkhead: &bulkhead.Config{Total: 1 << 16, Pools: map[string]bulkhead.PoolConfig{"enterprise": {Share: 1}}},
		Adaptive: &shed.AdaptiveConfig{Min: 1 << 16, Max: 1 << 16, Initial: 1 << 16, MaxLatency: time.Hour},
		Shedding: &shed.SheddingConfig{}}
	g, err := New(cfg, reg, Options{})
	if err != nil {
		b.Fatal(err)
	}
	runBenchCheck(context.Background(), b, g)
}

func TestUnauthKey(t *testing.T) {
	for remote, want := range map[string]string{
		"192.0.2.7:5555":             "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:443": "2001:db8:1:2::/64",
		"[::ffff:192.0.2.7]:80":      "::ffff:192.0.2.7",
	} {
		if got := unauthKey(remote); got != want {
			t.Errorf("unauthKey(%q) = %q, want %q", remote, got, want)
		}
	}
}

// A grouped route's buckets are taken all or nothing: an export the
// tenant's bucket refuses leaves its group's bucket untouched, so the
// Retry-After it is told holds (issue 12: "retry after 3 s" was followed by
// "429, retry after 37 s", the group emptied by the refused request).
func TestGroupedRouteAllOrNothing(t *testing.T) {
	clk := fakeclock.New()
	g, err := New(testConfig(), testRegistry(t), Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	export := req("start-key", "POST", "/api/v1/reports/export")
	if d := mustCheck(t, g, export); !d.Allowed {
		t.Fatalf("first export: %+v", d)
	}
	// The tenant's bucket holds 5 of the 20 an export costs; the group's 20.
	d := mustCheck(t, g, export)
	if d.Allowed || d.Reason != ReasonTenantQuota || d.RetryAfter != 3*time.Second {
		t.Fatalf("second export: %+v, want tenant_quota, retry after 3s", d)
	}
	clk.Advance(d.RetryAfter)
	if d := mustCheck(t, g, export); !d.Allowed {
		t.Fatalf("export after the Retry-After it was told: %+v, want admitted (the group's bucket was not charged)", d)
	}
}
