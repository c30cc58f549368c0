package admission

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fairgate/fairgate/internal/fakeclock"
	"github.com/fairgate/fairgate/tenant"
)

// withStarter returns a copy of c with its starter tier edited by edit.
func withStarter(c tenant.Config, edit func(*tenant.TierConfig)) tenant.Config {
	c.Tiers = maps.Clone(c.Tiers)
	tc := c.Tiers["starter"]
	edit(&tc)
	c.Tiers["starter"] = tc
	return c
}

// shadowTraffic is a seeded stream of requests of both test tenants over
// the three routes, with the time before each: enough for the starter's
// bucket, its exports group and an hourly limit each to refuse some.
type shadowStep struct {
	wait time.Duration
	req  Request
}

func shadowTraffic(seed uint64, n int) []shadowStep {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	routes := []struct{ method, path string }{{"GET", "/api/v1/users/me"}, {"GET", "/api/v1/search"}, {"POST", "/api/v1/reports/export"}}
	steps := make([]shadowStep, n)
	for i := range steps {
		key := "start-key"
		if rng.IntN(4) == 0 {
			key = "ent-key"
		}
		r := routes[[]int{0, 0, 1, 1, 2}[rng.IntN(5)]]
		steps[i] = shadowStep{wait: time.Duration(rng.IntN(400)) * time.Millisecond, req: req(key, r.method, r.path)}
	}
	return steps
}

// TestShadowRejectsWhatEnforcementRejects runs one stream of traffic
// through a gate whose rate quotas are enforced (the negative control: it
// must refuse, by each of the tenant's bucket, its group's and its
// limit) and through one in shadow mode, set on the tier, on the tenant
// or on every route. The shadow gate refuses nothing, and the requests it
// marks as would-be rejections are exactly those the enforcing gate
// refused, for the same reason, with the same bucket states in the
// RateLimit headers; the metrics agree (outcome="shadow_reject" against
// "reject"), and the log has at most a line per tenant per ten seconds.
func TestShadowRejectsWhatEnforcementRejects(t *testing.T) {
	base := withStarter(testTenants(20), func(tc *tenant.TierConfig) {
		tc.Limits = []tenant.LimitConfig{{Name: "hourly", Burst: 1500, Per: tenant.Per(time.Hour)}}
	})
	cfg := testConfig()
	for _, tc := range []struct {
		name    string
		tenants tenant.Config
		routes  bool
	}{
		{"tier", withStarter(base, func(tc *tenant.TierConfig) { tc.Shadow = true }), false},
		{"tenant", func() tenant.Config {
			c := base
			c.Tenants = append([]tenant.TenantConfig(nil), base.Tenants...)
			on := true
			c.Tenants[1].Shadow = &on
			return c
		}(), false},
		{"route", base, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := fakeclock.New()
			enforceReg := prometheus.NewRegistry()
			enforceM, err := NewMetrics(enforceReg)
			if err != nil {
				t.Fatal(err)
			}
			enforce, err := New(cfg, testRegistryOf(t, base), Options{Now: clk.Now, Metrics: enforceM})
			if err != nil {
				t.Fatal(err)
			}
			shadowCfg := testConfig()
			if tc.routes {
				for i := range shadowCfg.Routes {
					shadowCfg.Routes[i].Shadow = true
				}
			}
			shadowReg := prometheus.NewRegistry()
			shadowM, err := NewMetrics(shadowReg)
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			shadow, err := New(shadowCfg, testRegistryOf(t, tc.tenants), Options{Now: clk.Now, Metrics: shadowM,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatal(err)
			}
			steps := shadowTraffic(14, 800)
			var elapsed time.Duration
			rejected := map[Reason]int{}
			for i, st := range steps {
				clk.Advance(st.wait)
				elapsed += st.wait
				e := mustCheck(t, enforce, st.req)
				s := mustCheck(t, shadow, st.req)
				if !s.Allowed {
					t.Fatalf("step %d: shadow gate refused %+v", i, s)
				}
				want := ReasonNone
				if !e.Allowed {
					want = e.Reason
					rejected[e.Reason]++
				}
				if s.ShadowRejected != want {
					t.Fatalf("step %d (%s %s): shadow marked %v, enforcement %v", i, st.req.Header.Get("Authorization"), st.req.Path, s.ShadowRejected, want)
				}
				if s.NQuotas != e.NQuotas || s.Quotas != e.Quotas {
					t.Fatalf("step %d: shadow reported buckets %+v, enforcement %+v", i, s.Quotas[:s.NQuotas], e.Quotas[:e.NQuotas])
				}
			}
			for _, r := range []Reason{ReasonTenantQuota, ReasonGroupQuota, ReasonLimitQuota} {
				if rejected[r] == 0 {
					t.Fatalf("enforcement refused nothing for %v (%v): the traffic does not test it", r, rejected)
				}
			}
			total := rejected[ReasonTenantQuota] + rejected[ReasonGroupQuota] + rejected[ReasonLimitQuota]
			if got, want := decisionsWith(t, shadowReg, "rate", OutcomeShadowReject), float64(total); got != want {
				t.Errorf("shadow gate counted %v shadow_reject, enforcement refused %v", got, want)
			}
			if got, want := decisionsWith(t, enforceReg, "rate", OutcomeReject), float64(total); got != want {
				t.Errorf("enforcing gate counted %v rate rejections, refused %v", got, want)
			}
			if got := decisionsWith(t, shadowReg, "", OutcomeReject); got != 0 {
				t.Errorf("shadow gate counted %v rejections", got)
			}
			lines := strings.Count(logs.String(), "rate shadow mode: would have rejected")
			t.Logf("%d requests over %v: enforcement refused %v; shadow admitted all, %d log lines", len(steps), elapsed, rejected, lines)
			if most := int(elapsed/DefaultShadowLogEvery) + 1; lines < 1 || lines > most {
				t.Errorf("%d shadow log lines over %v for %d would-be rejections of one tenant, want 1 to %d", lines, elapsed, total, most)
			}
		})
	}
}

// decisionsWith sums fairgate_decisions_total over the series with the
// given outcome and layer (any layer when layer is empty).
func decisionsWith(t *testing.T, reg *prometheus.Registry, layer, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "fairgate_decisions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label(m, "outcome") == outcome && (layer == "" || label(m, "layer") == layer) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestShadowKeepsTheBackstop: shadow mode covers the tenant's own quotas
// only; the global backstop, which protects the service, still refuses
// (503), and the tenant's bucket's would-be rejections are still marked.
func TestShadowKeepsTheBackstop(t *testing.T) {
	cfg := testConfig()
	cfg.Global = &GlobalConfig{Rate: 1, Burst: 30}
	g, _ := clockedGate(t, cfg, testRegistryOf(t, withStarter(testTenants(5), func(tc *tenant.TierConfig) { tc.Shadow = true })))
	var backstop, marked int
	for range 20 {
		d := mustCheck(t, g, req("start-key", "GET", "/api/v1/search"))
		if d.Reason == ReasonGlobalBackstop {
			backstop++
		} else if !d.Allowed {
			t.Fatalf("refused by %v in shadow mode", d.Reason)
		}
		if d.ShadowRejected == ReasonTenantQuota {
			marked++
		}
	}
	if backstop == 0 || marked == 0 {
		t.Fatalf("%d backstop refusals and %d marked would-be tenant_quota rejections in 20 searches, want some of each", backstop, marked)
	}
}

// TestShadowHeadersRealState: a request shadow mode admitted reaches the
// upstream with the RateLimit headers of the buckets' real state (none
// left) and no Retry-After.
func TestShadowHeadersRealState(t *testing.T) {
	g, _ := clockedGate(t, testConfig(), testRegistryOf(t, withStarter(testTenants(5), func(tc *tenant.TierConfig) { tc.Shadow = true })))
	served := 0
	h := g.Middleware(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served++ }))
	var w *httptest.ResponseRecorder
	for range 7 { // a burst of 25 holds five searches
		w = httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/api/v1/search", nil)
		r.Header.Set("X-API-Key", "start-key")
		h.ServeHTTP(w, r)
	}
	if served != 7 || w.Code != http.StatusOK {
		t.Fatalf("%d of 7 served, last status %d: shadow mode refused", served, w.Code)
	}
	for k, want := range map[string]string{"Ratelimit-Remaining": "0", "Ratelimit": `"tenant";r=0;t=5`, "Retry-After": ""} {
		if got := w.Header().Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
}

// TestShadowSpanAttribute: the rate span of a request shadow mode
// admitted says so and names the bucket; the root span is an admission
// that carries the mark.
func TestShadowSpanAttribute(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	reg := testRegistryOf(t, withStarter(testTenants(5), func(tc *tenant.TierConfig) { tc.Shadow = true }))
	g, err := New(testConfig(), reg, Options{TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	ctx, root := tp.Tracer("test").Start(context.Background(), SpanRequest)
	var d Decision
	for range 7 { // a burst of 25 holds five searches
		if d, err = g.Check(ctx, req("start-key", "GET", "/api/v1/search")); err != nil || !d.Allowed {
			t.Fatalf("%+v %v", d, err)
		}
		d.Lease().Release()
	}
	d.Annotate(root)
	root.End()
	var rate, top map[string]string
	for _, s := range rec.Ended() {
		attrs := map[string]string{}
		for _, kv := range s.Attributes() {
			attrs[string(kv.Key)] = kv.Value.Emit()
		}
		switch s.Name() {
		case SpanRate:
			rate = attrs
		case SpanRequest:
			top = attrs
		}
	}
	if rate["ratelimit.shadow_reject"] != "true" || rate["ratelimit.bucket"] != "tenant_quota" {
		t.Errorf("last rate span: %v, want ratelimit.shadow_reject true and ratelimit.bucket tenant_quota", rate)
	}
	if top["ratelimit.shadow_reject"] != "true" || top[string(AttrDecision)] != OutcomeAdmit {
		t.Errorf("root span: %v, want an admission marked ratelimit.shadow_reject", top)
	}
}
