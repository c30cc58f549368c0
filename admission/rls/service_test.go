package rls

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// step is one call and what its answer must be. A want of -1 in remaining
// means the status carries no limit (not limited).
type step struct {
	name      string
	advance   time.Duration // clock moves first
	req       *rlsv3.RateLimitRequest
	overall   rlsv3.RateLimitResponse_Code
	codes     []rlsv3.RateLimitResponse_Code
	remaining []int64
	reset     []time.Duration // duration_until_reset, when limited
	limitName string          // current_limit.name of the first status, when set
	unnamed   bool            // current_limit.name of the first status must be empty
}

func runSteps(t *testing.T, h *harness, steps []step) {
	t.Helper()
	for i, s := range steps {
		h.clock.Advance(s.advance)
		resp := h.call(t, s.req)
		if resp.OverallCode != s.overall {
			t.Fatalf("step %d (%s): overall %v, want %v", i, s.name, resp.OverallCode, s.overall)
		}
		if len(resp.Statuses) != len(s.req.Descriptors) {
			t.Fatalf("step %d (%s): %d statuses for %d descriptors", i, s.name, len(resp.Statuses), len(s.req.Descriptors))
		}
		for j, st := range resp.Statuses {
			if j < len(s.codes) && st.Code != s.codes[j] {
				t.Errorf("step %d (%s): statuses[%d].code %v, want %v", i, s.name, j, st.Code, s.codes[j])
			}
			if j >= len(s.remaining) {
				continue
			}
			if s.remaining[j] < 0 {
				if st.CurrentLimit != nil {
					t.Errorf("step %d (%s): statuses[%d] limited by %v, want no limit", i, s.name, j, st.CurrentLimit)
				}
				continue
			}
			if st.CurrentLimit == nil {
				t.Errorf("step %d (%s): statuses[%d] has no current_limit", i, s.name, j)
				continue
			}
			if got := int64(st.LimitRemaining); got != s.remaining[j] {
				t.Errorf("step %d (%s): statuses[%d].limit_remaining %d, want %d", i, s.name, j, got, s.remaining[j])
			}
			if j < len(s.reset) {
				if got := st.DurationUntilReset.AsDuration(); got != s.reset[j] {
					t.Errorf("step %d (%s): statuses[%d].duration_until_reset %v, want %v", i, s.name, j, got, s.reset[j])
				}
			}
		}
		if (s.limitName != "" || s.unnamed) && resp.Statuses[0].GetCurrentLimit().GetName() != s.limitName {
			t.Errorf("step %d (%s): current_limit.name %q, want %q", i, s.name, resp.Statuses[0].GetCurrentLimit().GetName(), s.limitName)
		}
	}
}

func codesOf(c ...rlsv3.RateLimitResponse_Code) []rlsv3.RateLimitResponse_Code { return c }
func rem(r ...int64) []int64                                                   { return r }
func resets(d ...time.Duration) []time.Duration                                { return d }

// TestEdgeConfig: testdata/edge.yaml decision by decision: a key-only
// descriptor limits each value apart; a value beats the key-only rule; a
// limit of zero refuses all; OVER_LIMIT carries the time until the bucket
// holds the cost.
func TestEdgeConfig(t *testing.T) {
	h := start(t, Config{}, mustLoad(t, "testdata/edge.yaml"), Options{})
	addr := func(a string) *rlsv3.RateLimitRequest { return request("edge", 0, desc("remote_address", a)) }
	var steps []step
	for i := range 5 {
		steps = append(steps, step{name: "burst", req: addr("1.2.3.4"), overall: ok, codes: codesOf(ok), remaining: rem(int64(4 - i))})
	}
	steps = append(steps,
		step{name: "6th in the second", req: addr("1.2.3.4"), overall: over, codes: codesOf(over), remaining: rem(0), reset: resets(200 * time.Millisecond)},
		step{name: "another address has its own bucket", req: addr("5.6.7.8"), overall: ok, remaining: rem(4), reset: resets(200 * time.Millisecond)},
		step{name: "a token back after 200ms", advance: 200 * time.Millisecond, req: addr("1.2.3.4"), overall: ok, remaining: rem(0), reset: resets(time.Second)},
		step{name: "blocked address, most specific wins", req: addr("10.0.0.1"), overall: over, remaining: rem(0), reset: resets(time.Second)},
		step{name: "login 1", req: request("edge", 0, desc("path", "/login")), overall: ok, remaining: rem(2), reset: resets(20 * time.Second), limitName: "login"},
		step{name: "login 2", req: request("edge", 0, desc("path", "/login")), overall: ok, remaining: rem(1)},
		step{name: "login 3", req: request("edge", 0, desc("path", "/login")), overall: ok, remaining: rem(0), reset: resets(time.Minute)},
		step{name: "login 4 over", req: request("edge", 0, desc("path", "/login")), overall: over, remaining: rem(0), reset: resets(20 * time.Second)},
		step{name: "other path: no limit", req: request("edge", 0, desc("path", "/other")), overall: ok, remaining: rem(-1)},
		// All or nothing: the address's bucket is not charged for a
		// request /login refuses.
		step{name: "two descriptors, one over", req: request("edge", 0, desc("remote_address", "9.9.9.9"), desc("path", "/login")),
			overall: over, codes: codesOf(ok, over), remaining: rem(5, 0)},
		step{name: "unknown key leaves the tree", req: request("edge", 0, desc("remote_address", "1.1.1.1", "extra", "x")), overall: ok, remaining: rem(-1)},
	)
	runSteps(t, h, steps)
}

// TestNestedConfig: testdata/nested.yaml: nested descriptors, exact value
// before prefix before key-only, unlimited.
func TestNestedConfig(t *testing.T) {
	h := start(t, Config{}, mustLoad(t, "testdata/nested.yaml"), Options{})
	steps := []step{
		{name: "client and route", req: request("api", 0, desc("client_id", "bob", "route", "/x")), overall: ok, remaining: rem(99), reset: resets(36 * time.Second)},
		{name: "client alone has no limit", req: request("api", 0, desc("client_id", "bob")), overall: ok, remaining: rem(-1)},
		{name: "premium 1", req: request("api", 0, desc("client_id", "premium")), overall: ok, remaining: rem(1)},
		{name: "premium 2", req: request("api", 0, desc("client_id", "premium")), overall: ok, remaining: rem(0)},
		{name: "premium 3", req: request("api", 0, desc("client_id", "premium")), overall: over, remaining: rem(0), reset: resets(500 * time.Millisecond)},
		{name: "premium export 1", req: request("api", 0, desc("client_id", "premium", "route", "/export")), overall: ok, remaining: rem(1), limitName: "premium-export"},
		{name: "premium export 2", req: request("api", 0, desc("client_id", "premium", "route", "/export")), overall: ok, remaining: rem(0)},
		{name: "premium export 3", req: request("api", 0, desc("client_id", "premium", "route", "/export")), overall: over, remaining: rem(0), reset: resets(12 * time.Hour)},
		// current_limit.name is the rate_limit's name, empty without one.
		{name: "premium prefix", req: request("api", 0, desc("client_id", "premium", "route", "/v1/users")), overall: ok, remaining: rem(3), unnamed: true},
		{name: "premium unmatched route", req: request("api", 0, desc("client_id", "premium", "route", "/other")), overall: ok, remaining: rem(-1)},
		{name: "unlimited", req: request("api", 0, desc("generic_key", "free")), overall: ok, remaining: rem(-1)},
	}
	runSteps(t, h, steps)
}

// TestHitsAddend: the request's hits_addend is the cost (0 means 1); a
// descriptor's own hits_addend wins; a cost above what is left is refused
// without taking anything (its status, OVER_LIMIT, says 0 remaining, as
// envoyproxy/ratelimit's do; the next call finds the tokens).
func TestHitsAddend(t *testing.T) {
	h := start(t, Config{}, mustLoad(t, "testdata/edge.yaml"), Options{})
	d := func() *commonrl.RateLimitDescriptor { return desc("remote_address", "1.2.3.4") }
	one := d()
	one.HitsAddend = wrapperspb.UInt64(1)
	runSteps(t, h, []step{
		{name: "3 hits", req: request("edge", 3, d()), overall: ok, remaining: rem(2)},
		{name: "3 more: over, nothing taken", req: request("edge", 3, d()), overall: over, remaining: rem(0), reset: resets(200 * time.Millisecond)},
		{name: "descriptor's own hits_addend 1", req: request("edge", 3, one), overall: ok, remaining: rem(1)},
		{name: "0 means 1", req: request("edge", 0, d()), overall: ok, remaining: rem(0)},
	})
}

// TestReplaces: a matched limit that replaces another by name leaves the
// other descriptor unlimited in that request.
func TestReplaces(t *testing.T) {
	h := start(t, Config{}, mustLoad(t, "testdata/replaces.yaml"), Options{})
	runSteps(t, h, []step{
		{name: "per-tenant 1", req: request("replaces", 0, desc("tenant", "zed")), overall: ok, remaining: rem(1)},
		{name: "per-tenant 2", req: request("replaces", 0, desc("tenant", "zed")), overall: ok, remaining: rem(0)},
		{name: "per-tenant 3", req: request("replaces", 0, desc("tenant", "zed")), overall: over},
		{name: "vip replaces per-tenant", req: request("replaces", 0, desc("tenant", "zed"), desc("tenant_vip", "acme")),
			overall: ok, codes: codesOf(ok, ok), remaining: rem(-1, 9)},
	})
}

// TestLimitOverride: Envoy's request-level limit replaces the configured
// one (and applies to a descriptor the config does not limit).
func TestLimitOverride(t *testing.T) {
	h := start(t, Config{}, mustLoad(t, "testdata/edge.yaml"), Options{})
	d := desc("remote_address", "1.2.3.4")
	d.Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: typev3.RateLimitUnit_MINUTE}
	o := desc("path", "/unconfigured")
	o.Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND, UnitMultiplier: wrapperspb.UInt32(10)}
	runSteps(t, h, []step{
		{name: "override 1", req: request("edge", 0, d), overall: ok, remaining: rem(1), reset: resets(30 * time.Second)},
		{name: "override 2", req: request("edge", 0, d), overall: ok, remaining: rem(0)},
		{name: "override 3", req: request("edge", 0, d), overall: over, remaining: rem(0), reset: resets(30 * time.Second)},
		{name: "unconfigured 1", req: request("edge", 0, o), overall: ok, remaining: rem(0), reset: resets(10 * time.Second)},
		{name: "unconfigured 2", req: request("edge", 0, o), overall: over, reset: resets(10 * time.Second)},
	})
	resp := h.call(t, request("edge", 0, o))
	if m := resp.Statuses[0].CurrentLimit.GetUnitMultiplier().GetValue(); m != 10 {
		t.Errorf("current_limit.unit_multiplier %d, want 10", m)
	}
}

// TestUnknownDomainOK: Envoy expects OK for a domain the service does not
// know.
func TestUnknownDomainOK(t *testing.T) {
	h := start(t, Config{}, mustLoad(t, "testdata/edge.yaml"), Options{})
	for range 10 {
		resp := h.call(t, request("nope", 0, desc("remote_address", "1.2.3.4"), desc("path", "/login")))
		if resp.OverallCode != ok || len(resp.Statuses) != 2 || resp.Statuses[0].Code != ok || len(resp.ResponseHeadersToAdd) != 0 {
			t.Fatalf("unknown domain: %v", resp)
		}
	}
}

// TestMalformedRequests: InvalidArgument, never a panic or an OK, for what
// no answer could mean (what envoyproxy/ratelimit answers, this answers
// too: TestAnswersWhatERLAnswers).
func TestMalformedRequests(t *testing.T) {
	h := start(t, Config{}, mustLoad(t, "testdata/edge.yaml"), Options{})
	badUnit := desc("remote_address", "a")
	badUnit.Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1}
	zeroMul := desc("remote_address", "a")
	zeroMul.Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_SECOND, UnitMultiplier: wrapperspb.UInt32(0)}
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
	}{
		{"empty request", &rlsv3.RateLimitRequest{}},
		{"no domain", request("", 0, desc("a", "b"))},
		{"no descriptors", request("edge", 0)},
		{"override without unit", request("edge", 0, badUnit)},
		{"override multiplier 0", request("edge", 0, zeroMul)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.client.ShouldRateLimit(context.Background(), tc.req)
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("got %v, want InvalidArgument", err)
			}
		})
	}
}

// TestResponseHeaders: the IETF RateLimit headers describe the descriptor
// that decided; Retry-After only when over, in whole seconds, at least 1.
func TestResponseHeaders(t *testing.T) {
	h := start(t, Config{ResponseHeaders: true}, mustLoad(t, "testdata/edge.yaml"), Options{})
	login := request("edge", 0, desc("remote_address", "1.2.3.4"), desc("path", "/login"))
	resp := h.call(t, login)
	checkHeaders(t, resp, map[string]string{
		"RateLimit-Policy":    `"remote_address";q=5;w=1, "login";q=3;w=60`,
		"RateLimit":           `"login";r=2;t=20`,
		"RateLimit-Limit":     "3",
		"RateLimit-Remaining": "2",
		"RateLimit-Reset":     "20",
		"Retry-After":         "",
	})
	h.call(t, login)
	h.call(t, login)
	resp = h.call(t, login)
	if got := header(resp, "Retry-After"); got != "20" {
		t.Errorf("over: Retry-After %q, want 20", got)
	}
	if got := header(resp, "RateLimit"); got != `"login";r=0;t=20` {
		t.Errorf("over: RateLimit %q", got)
	}
	h2 := start(t, Config{}, mustLoad(t, "testdata/edge.yaml"), Options{})
	if resp := h2.call(t, login); len(resp.ResponseHeadersToAdd) != 0 {
		t.Errorf("response_headers by default: %v", resp.ResponseHeadersToAdd)
	}
}

// TestShadowMatchesEnforcement: with shadow mode nothing is rejected, and
// the would-be rejections equal what enforcement rejects on the same
// traffic (the negative control: the enforced descriptor, same limit,
// same calls). Tokens are taken as usual, so the remaining counts agree.
func TestShadowMatchesEnforcement(t *testing.T) {
	reg := prometheus.NewRegistry()
	tel, err := NewTelemetry(TelemetryOptions{Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, Config{}, mustLoad(t, "testdata/shadow"), Options{Telemetry: tel})
	var shadowOver, enforcedOver int
	for i := range 40 {
		if i%4 == 0 {
			h.clock.Advance(250 * time.Millisecond)
		}
		user := []string{"ann", "bo"}[i%2]
		s := h.call(t, request("rollout", 0, desc("user", user)))
		e := h.call(t, request("rollout", 0, desc("enforced_user", user)))
		if s.OverallCode != ok {
			t.Fatalf("call %d: shadow descriptor answered %v", i, s.OverallCode)
		}
		if e.OverallCode == over {
			enforcedOver++
		}
		if s.Statuses[0].LimitRemaining != e.Statuses[0].LimitRemaining {
			t.Fatalf("call %d: shadow remaining %d, enforced %d", i, s.Statuses[0].LimitRemaining, e.Statuses[0].LimitRemaining)
		}
		if header(s, "Retry-After") != "" {
			t.Fatalf("call %d: shadow answer has Retry-After", i)
		}
	}
	shadowOver = int(testutil.ToFloat64(tel.decisions.WithLabelValues("rollout", "user", OutcomeShadowReject)))
	rejected := int(testutil.ToFloat64(tel.decisions.WithLabelValues("rollout", "enforced_user", OutcomeReject)))
	if enforcedOver == 0 || shadowOver != enforcedOver || rejected != enforcedOver {
		t.Fatalf("shadow_reject %d, enforcement rejected %d (metric %d): want equal and > 0", shadowOver, enforcedOver, rejected)
	}
	if n := testutil.ToFloat64(tel.decisions.WithLabelValues("rollout", "user", OutcomeReject)); n != 0 {
		t.Fatalf("shadow descriptor counted %v rejections", n)
	}
}

// TestDescriptorsAllOrNothing: several descriptors of one request are
// charged in one TakeAll: a request one refuses charges none; a shadow
// descriptor that refuses lets the request through and its enforced
// descriptors pay; an enforced limit of zero refuses without charging the
// others; one bucket named twice is charged both costs.
func TestDescriptorsAllOrNothing(t *testing.T) {
	rules := mustRules(t, Source{"a.yaml", []byte(`domain: a
descriptors:
  - {key: user, rate_limit: {unit: minute, requests_per_unit: 5}}
  - {key: path, value: /login, rate_limit: {name: login, unit: minute, requests_per_unit: 2}}
  - {key: path, value: /beta, shadow_mode: true, rate_limit: {name: beta, unit: minute, requests_per_unit: 1}}
  - {key: path, value: /closed, rate_limit: {unit: minute, requests_per_unit: 0}}
`)})
	h := start(t, Config{}, rules, Options{})
	ann, login := func() *commonrl.RateLimitDescriptor { return desc("user", "ann") }, func() *commonrl.RateLimitDescriptor { return desc("path", "/login") }
	runSteps(t, h, []step{
		{name: "both 1", req: request("a", 0, ann(), login()), overall: ok, remaining: rem(4, 1)},
		{name: "both 2", req: request("a", 0, ann(), login()), overall: ok, remaining: rem(3, 0)},
		{name: "login over: ann not charged", req: request("a", 0, ann(), login()), overall: over, codes: codesOf(ok, over), remaining: rem(3, 0)},
		{name: "login over again", req: request("a", 0, ann(), login()), overall: over, codes: codesOf(ok, over), remaining: rem(3, 0)},
		{name: "ann alone: the refusals took nothing", req: request("a", 0, ann()), overall: ok, remaining: rem(2)},
		{name: "beta 1", req: request("a", 0, ann(), desc("path", "/beta")), overall: ok, remaining: rem(1, 0)},
		{name: "beta over in shadow: admitted, ann pays", req: request("a", 0, ann(), desc("path", "/beta")), overall: ok, codes: codesOf(ok, ok), remaining: rem(0, 0)},
		{name: "closed refuses, ann's state not asked", advance: time.Minute, req: request("a", 0, ann(), desc("path", "/closed")), overall: over, codes: codesOf(ok, over), remaining: rem(-1, 0)},
		{name: "ann untouched by the closed path", req: request("a", 0, ann()), overall: ok, remaining: rem(4)},
		{name: "one bucket twice: both costs", req: request("a", 0, ann(), ann()), overall: ok, remaining: rem(2, 2)},
		{name: "one bucket twice, over: none taken", req: request("a", 2, ann(), ann()), overall: over, remaining: rem(0, 0)},
		{name: "ann alone after it", req: request("a", 0, ann()), overall: ok, remaining: rem(1)},
	})
}

// TestShadowMirrorsEnforcementSeveralDescriptors: a seeded stream of
// calls of one to three descriptors through an enforcing service (the
// negative control: it must refuse some) and through one with rls.shadow:
// the shadow service answers OK to every call, reports the same remaining
// tokens for every descriptor (a call enforcement refuses is charged to
// none of its descriptors in either), and counts as shadow_reject exactly
// the descriptors enforcement refused.
func TestShadowMirrorsEnforcementSeveralDescriptors(t *testing.T) {
	rules := mustRules(t, Source{"m.yaml", []byte(`domain: m
descriptors:
  - {key: user, rate_limit: {unit: second, requests_per_unit: 4}}
  - {key: path, value: /login, rate_limit: {name: login, unit: minute, requests_per_unit: 20}}
  - {key: team, rate_limit: {unit: second, requests_per_unit: 6}}
`)})
	var tels [2]*Telemetry
	var hs [2]*harness
	for i, cfg := range []Config{{}, {Shadow: true}} {
		tel, err := NewTelemetry(TelemetryOptions{Metrics: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		tels[i], hs[i] = tel, start(t, cfg, rules, Options{Telemetry: tel})
	}
	rng := rand.New(rand.NewPCG(14, 3))
	pool := []func() *commonrl.RateLimitDescriptor{
		func() *commonrl.RateLimitDescriptor { return desc("user", "ann") },
		func() *commonrl.RateLimitDescriptor { return desc("user", "bo") },
		func() *commonrl.RateLimitDescriptor { return desc("path", "/login") },
		func() *commonrl.RateLimitDescriptor { return desc("team", "t") },
	}
	overCalls := 0
	for i := range 400 {
		wait := time.Duration(rng.IntN(150)) * time.Millisecond
		var ds []*commonrl.RateLimitDescriptor
		for _, j := range rng.Perm(len(pool))[:1+rng.IntN(3)] {
			ds = append(ds, pool[j]())
		}
		var resp [2]*rlsv3.RateLimitResponse
		for k, h := range hs {
			h.clock.Advance(wait)
			resp[k] = h.call(t, request("m", 0, ds...))
		}
		if resp[1].OverallCode != ok {
			t.Fatalf("call %d: shadow service answered %v", i, resp[1].OverallCode)
		}
		if resp[0].OverallCode == over {
			overCalls++
		}
		for j := range ds {
			if e, s := resp[0].Statuses[j].LimitRemaining, resp[1].Statuses[j].LimitRemaining; e != s {
				t.Fatalf("call %d descriptor %d: enforced remaining %d, shadow %d", i, j, e, s)
			}
		}
	}
	sum := func(tel *Telemetry, outcome string) float64 {
		n := 0.0
		for _, d := range []string{"user", "path=/login", "team"} {
			n += testutil.ToFloat64(tel.decisions.WithLabelValues("m", d, outcome))
		}
		return n
	}
	rejected, shadowRejected := sum(tels[0], OutcomeReject), sum(tels[1], OutcomeShadowReject)
	t.Logf("400 calls: %d refused by enforcement, %v descriptors over", overCalls, rejected)
	if overCalls < 20 || rejected != shadowRejected || sum(tels[1], OutcomeReject) != 0 {
		t.Fatalf("enforcement refused %d calls, %v descriptors; shadow counted %v shadow_reject: want equal and some", overCalls, rejected, shadowRejected)
	}
}

// TestGlobalShadow: rls.shadow puts every descriptor in shadow mode: the
// overall code is OK, while a descriptor over its limit has the status
// OVER_LIMIT, as envoyproxy/ratelimit's SHADOW_MODE answers (Envoy logs
// and counts it); the headers still describe the real state. A
// descriptor's own shadow_mode answers OK in its status too.
func TestGlobalShadow(t *testing.T) {
	h := start(t, Config{Shadow: true, ResponseHeaders: true}, mustLoad(t, "testdata/edge.yaml"), Options{})
	for i := range 10 {
		resp := h.call(t, request("edge", 0, desc("path", "/login")))
		if resp.OverallCode != ok {
			t.Fatalf("call %d: %v under global shadow", i, resp.OverallCode)
		}
		st := resp.Statuses[0]
		if want := map[bool]rlsv3.RateLimitResponse_Code{false: ok, true: over}[i >= 3]; st.Code != want {
			t.Fatalf("call %d: status %v, want %v", i, st.Code, want)
		}
		if i >= 3 && (st.CurrentLimit.GetRequestsPerUnit() != 3 || st.LimitRemaining != 0) {
			t.Fatalf("call %d: status %v, want the limit and 0 remaining", i, st)
		}
		if i >= 3 && header(resp, "RateLimit-Remaining") != "0" {
			t.Fatalf("call %d: RateLimit-Remaining %q, want the real 0", i, header(resp, "RateLimit-Remaining"))
		}
	}
	own := mustRules(t, Source{"s.yaml", []byte("domain: s\ndescriptors:\n  - {key: user, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}\n")})
	h = start(t, Config{}, own, Options{})
	runSteps(t, h, []step{
		{name: "own shadow_mode 1", req: request("s", 0, desc("user", "u")), overall: ok, codes: codesOf(ok), remaining: rem(0)},
		{name: "own shadow_mode over: status OK", req: request("s", 0, desc("user", "u")), overall: ok, codes: codesOf(ok), remaining: rem(0)},
	})
}

// TestHealth: the health service answers SERVING for the server and for
// the rate limit service while up (TestGracefulStop covers the stop).
func TestHealth(t *testing.T) {
	h := start(t, Config{}, mustLoad(t, "testdata/edge.yaml"), Options{})
	hc := healthpb.NewHealthClient(h.conn)
	for _, svc := range []string{"", ServiceName} {
		r, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q: %v %v", svc, r, err)
		}
	}
}

// TestReload: new rules apply to later calls; a bad file keeps the old.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	write := func(rpu string) {
		t.Helper()
		data := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: " + rpu + "}\n"
		if err := writeFile(dir+"/d.yaml", data); err != nil {
			t.Fatal(err)
		}
	}
	write("1")
	srv, err := New(Config{Configs: []string{dir}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	lim := func() uint32 {
		resp, err := srv.Service().ShouldRateLimit(context.Background(), request("d", 0, desc("k", "v")))
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0].CurrentLimit.GetRequestsPerUnit()
	}
	if got := lim(); got != 1 {
		t.Fatalf("limit %d, want 1", got)
	}
	write("7")
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := lim(); got != 7 {
		t.Fatalf("after reload: limit %d, want 7", got)
	}
	write("x")
	if err := srv.Reload(); err == nil {
		t.Fatal("a bad file reloaded")
	}
	if got := lim(); got != 7 {
		t.Fatalf("after a bad reload: limit %d, want 7", got)
	}
}

// FuzzShouldRateLimit: any request is an answer or InvalidArgument, never
// a panic, and an answer has one status per descriptor.
func FuzzShouldRateLimit(f *testing.F) {
	f.Add("edge", "remote_address", "1.2.3.4", "path", "/login", uint32(0), uint64(0), false, uint8(2))
	f.Add("api", "client_id", "premium", "route", "/v1/x", uint32(3), uint64(7), true, uint8(1))
	f.Add("", "", "", "", "", uint32(1<<31), uint64(1<<63), false, uint8(0))
	rules := mustLoad(f, "testdata/edge.yaml", "testdata/nested.yaml", "testdata/replaces.yaml")
	svc, err := NewService(Config{}, rules, Options{Store: ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{})})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, domain, k1, v1, k2, v2 string, hits uint32, own uint64, override bool, n uint8) {
		d := desc(k1, v1, k2, v2)
		if own > 0 {
			d.HitsAddend = wrapperspb.UInt64(own)
		}
		if override {
			d.Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: hits, Unit: typev3.RateLimitUnit(n % 8)}
		}
		var ds []*commonrl.RateLimitDescriptor
		for range n % 4 {
			ds = append(ds, d)
		}
		req := request(domain, hits, ds...)
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("%v: %v", req, err)
			}
			return
		}
		if len(resp.Statuses) != len(ds) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(ds))
		}
	})
}

// unknownStore answers every take without reading a bucket: admitted, as
// a Redis store does under fail_open or in sync mode with several
// instances, or denied until retry, as its denial cache does.
type unknownStore struct{ retry time.Duration }

func (u unknownStore) Take(context.Context, ratelimit.BucketKey, ratelimit.Limit, float64) (ratelimit.Result, error) {
	return ratelimit.Result{Allowed: u.retry == 0, RetryAfter: u.retry, StateUnknown: true}, nil
}

// TestUnknownStateNotTold (issue 12: send only what is known): a take the
// store admitted without reading the bucket was told to Envoy and the
// client as "0 remaining". The policy is told; the state is not. A
// remembered denial is told in full (issue 31): the limit, nothing
// remaining, and the wait (TestOverLimitTellsTheLimit).
func TestUnknownStateNotTold(t *testing.T) {
	h := start(t, Config{ResponseHeaders: true}, mustLoad(t, "testdata/edge.yaml"), Options{Store: unknownStore{}})
	resp := h.call(t, request("edge", 0, desc("remote_address", "1.2.3.4"), desc("path", "/login")))
	checkHeaders(t, resp, map[string]string{
		"RateLimit-Policy":    `"remote_address";q=5;w=1, "login";q=3;w=60`,
		"RateLimit":           "",
		"RateLimit-Limit":     "",
		"RateLimit-Remaining": "",
		"RateLimit-Reset":     "",
	})
	for i, st := range resp.Statuses {
		if st.Code != rlsv3.RateLimitResponse_OK || st.CurrentLimit != nil || st.DurationUntilReset != nil {
			t.Errorf("status %d: %v; want OK with no limit state (Envoy's x-ratelimit headers come from it)", i, st)
		}
	}

	h = start(t, Config{ResponseHeaders: true}, mustLoad(t, "testdata/edge.yaml"), Options{Store: unknownStore{retry: 3 * time.Second}})
	resp = h.call(t, request("edge", 0, desc("remote_address", "1.2.3.4")))
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || header(resp, "Retry-After") != "3" || header(resp, "RateLimit") != `"remote_address";r=0;t=3` {
		t.Errorf("remembered denial: %v, Retry-After %q, RateLimit %q; want OVER_LIMIT, 3, r=0;t=3",
			resp.OverallCode, header(resp, "Retry-After"), header(resp, "RateLimit"))
	}
	if st := resp.Statuses[0]; st.CurrentLimit.GetRequestsPerUnit() != 5 || st.LimitRemaining != 0 || st.DurationUntilReset.AsDuration() != 3*time.Second {
		t.Errorf("remembered denial: status %v; want the limit, 0 remaining, reset in 3s", st)
	}
}
