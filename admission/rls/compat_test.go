package rls

import (
	"context"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/redistest"
)

// The answers of this file are envoyproxy/ratelimit's, where Envoy can
// tell them apart: each test names the call that shows it.

// compatRules are the rules the tests below share.
func compatRules(t testing.TB) *Rules {
	return mustRules(t, Source{"c.yaml", []byte(`domain: c
descriptors:
  - {key: user, rate_limit: {unit: minute, requests_per_unit: 3}}
  - {key: team, rate_limit: {unit: minute, requests_per_unit: 5}}
  - {key: named, rate_limit: {name: per_named, unit: minute, requests_per_unit: 1}}
  - {key: beta, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 3}}
  - {key: free, rate_limit: {unlimited: true}}
`)})
}

// check is a descriptor whose own hits_addend is 0.
func check(kv ...string) *commonrl.RateLimitDescriptor {
	d := desc(kv...)
	d.HitsAddend = wrapperspb.UInt64(0)
	return d
}

// withOverride is a descriptor with Envoy's request-level limit.
func withOverride(rpu uint32, unit typev3.RateLimitUnit, kv ...string) *commonrl.RateLimitDescriptor {
	d := desc(kv...)
	d.Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
	return d
}

// TestCheckOnly: a descriptor's own hits_addend of 0 is a check: it is
// never charged (envoyproxy/ratelimit answers OK with 3 remaining to
// five such calls at 3 a minute), and is over its limit when the bucket
// holds less than one token, refusing the request without charging its
// other descriptors.
func TestCheckOnly(t *testing.T) {
	h := start(t, Config{}, compatRules(t), Options{})
	var steps []step
	for range 5 {
		steps = append(steps, step{name: "check", req: request("c", 0, check("user", "ann")), overall: ok, codes: codesOf(ok), remaining: rem(3)})
	}
	steps = append(steps,
		step{name: "a hit", req: request("c", 0, desc("user", "ann")), overall: ok, remaining: rem(2)},
		step{name: "check after it", req: request("c", 0, check("user", "ann")), overall: ok, remaining: rem(2)},
		step{name: "a check beside a hit", req: request("c", 0, check("user", "ann"), desc("team", "t")), overall: ok, remaining: rem(2, 4)},
		step{name: "hit", req: request("c", 0, desc("user", "ann")), overall: ok, remaining: rem(1)},
		step{name: "last hit", req: request("c", 0, desc("user", "ann")), overall: ok, remaining: rem(0)},
		step{name: "check of an empty bucket: over; team not charged", req: request("c", 0, check("user", "ann"), desc("team", "t")),
			overall: over, codes: codesOf(over, ok), remaining: rem(0, -1), reset: resets(20 * time.Second)},
		step{name: "team untouched", req: request("c", 0, desc("team", "t")), overall: ok, remaining: rem(3)},
		step{name: "a token back", advance: 20 * time.Second, req: request("c", 0, check("user", "ann")), overall: ok, remaining: rem(1)},
	)
	runSteps(t, h, steps)

	// On the Redis store too a check reads the bucket and charges
	// nothing (TestCheckOnRedis has the rest).
	r := start(t, Config{}, compatRules(t), Options{Store: newRedisStore(t, redistest.StartServer(t).Addr())})
	for i := range 5 {
		resp := r.call(t, request("c", 0, check("user", "ann")))
		if resp.OverallCode != ok || resp.Statuses[0].CurrentLimit == nil || resp.Statuses[0].LimitRemaining != 3 {
			t.Fatalf("redis check %d: %v, want OK with 3 remaining", i, resp)
		}
	}
	if resp := r.call(t, request("c", 0, desc("user", "ann"))); resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("redis: a hit after five checks: %v, want 2 remaining", resp)
	}
}

// TestOverrideEnforcedUnderShadowMode: Envoy's request-level limit on a
// shadow_mode descriptor is enforced (envoyproxy/ratelimit gives an
// override no shadow mode); without it the descriptor stays in shadow.
func TestOverrideEnforcedUnderShadowMode(t *testing.T) {
	h := start(t, Config{}, compatRules(t), Options{})
	runSteps(t, h, []step{
		{name: "override 1", req: request("c", 0, withOverride(1, typev3.RateLimitUnit_MINUTE, "beta", "b")), overall: ok, remaining: rem(0)},
		{name: "override 2: over, enforced", req: request("c", 0, withOverride(1, typev3.RateLimitUnit_MINUTE, "beta", "b")), overall: over, codes: codesOf(over), remaining: rem(0)},
		{name: "plain: shadow, the bucket's real state", req: request("c", 0, desc("beta", "b")), overall: ok, codes: codesOf(ok), remaining: rem(0)},
	})
}

// TestOverrideSharesTheBucket: an override sent after plain calls on the
// same entries takes from the same bucket (envoyproxy/ratelimit: the same
// counter), so it is refused, on the embedded and on the Redis store.
func TestOverrideSharesTheBucket(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    func(t *testing.T) Options
	}{
		{"embedded", func(*testing.T) Options { return Options{} }},
		{"redis", func(t *testing.T) Options { return Options{Store: newRedisStore(t, redistest.StartServer(t).Addr())} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, Config{}, compatRules(t), tc.o(t))
			for i := range 3 {
				if resp := h.call(t, request("c", 0, desc("user", "o"))); resp.OverallCode != ok {
					t.Fatalf("plain call %d: %v", i, resp)
				}
			}
			resp := h.call(t, request("c", 0, withOverride(3, typev3.RateLimitUnit_MINUTE, "user", "o")))
			if resp.OverallCode != over || resp.Statuses[0].Code != over {
				t.Fatalf("override after three plain calls: %v, want OVER_LIMIT", resp)
			}
		})
	}
}

// TestAnswersWhatERLAnswers: what envoyproxy/ratelimit answers is
// answered, not refused: is_negative_hits is ignored (the hits are
// charged); a descriptor with no entries, or an entry without a key,
// matches nothing (OK, not limited), and an override on one limits it.
func TestAnswersWhatERLAnswers(t *testing.T) {
	h := start(t, Config{}, compatRules(t), Options{})
	neg := func() *commonrl.RateLimitDescriptor {
		d := desc("user", "neg")
		d.IsNegativeHits = true
		return d
	}
	empty := func() *commonrl.RateLimitDescriptor { return &commonrl.RateLimitDescriptor{} }
	emptyOverride := empty()
	emptyOverride.Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 1, Unit: typev3.RateLimitUnit_MINUTE}
	runSteps(t, h, []step{
		{name: "is_negative_hits 1", req: request("c", 0, neg()), overall: ok, remaining: rem(2)},
		{name: "is_negative_hits 2: charged", req: request("c", 0, neg()), overall: ok, remaining: rem(1)},
		{name: "no entries", req: request("c", 0, empty()), overall: ok, codes: codesOf(ok), remaining: rem(-1)},
		{name: "empty key", req: request("c", 0, desc("", "x")), overall: ok, codes: codesOf(ok), remaining: rem(-1)},
		{name: "empty key after a key", req: request("c", 0, desc("user", "u", "", "x")), overall: ok, remaining: rem(-1)},
		{name: "no entries beside a limited one", req: request("c", 0, empty(), desc("user", "neg")), overall: ok, codes: codesOf(ok, ok), remaining: rem(-1, 0)},
		{name: "override on no entries 1", req: request("c", 0, emptyOverride), overall: ok, remaining: rem(0)},
		{name: "override on no entries 2", req: request("c", 0, emptyOverride), overall: over, remaining: rem(0)},
	})
}

// TestOverLimitTellsTheLimit: every OVER_LIMIT status carries
// current_limit and limit_remaining (0), also when the Redis store's
// denial cache answers (Envoy makes its x-ratelimit headers only from
// statuses with a current_limit); current_limit.name is the rate_limit's
// name, empty without one or for an override.
func TestOverLimitTellsTheLimit(t *testing.T) {
	h := start(t, Config{}, compatRules(t), Options{Store: newRedisStore(t, redistest.StartServer(t).Addr())})
	for i := range 4 {
		resp := h.call(t, request("c", 0, desc("named", "n")))
		st := resp.Statuses[0]
		if st.CurrentLimit.GetRequestsPerUnit() != 1 || st.CurrentLimit.GetName() != "per_named" || st.DurationUntilReset.AsDuration() <= 0 {
			t.Fatalf("call %d: status %v, want the limit, named per_named, and a reset", i, st)
		}
		if (resp.OverallCode == over) != (i > 0) || i > 0 && (st.Code != over || st.LimitRemaining != 0) {
			t.Fatalf("call %d: %v", i, resp)
		}
	}
	for _, d := range []*commonrl.RateLimitDescriptor{desc("user", "u"), withOverride(2, typev3.RateLimitUnit_HOUR, "named", "n2")} {
		resp := h.call(t, request("c", 0, d))
		if name := resp.Statuses[0].GetCurrentLimit().GetName(); resp.Statuses[0].CurrentLimit == nil || name != "" {
			t.Fatalf("%v: current_limit %v, want one with no name", d, resp.Statuses[0].CurrentLimit)
		}
	}
}

// TestResponseHeadersOffByDefault: envoyproxy/ratelimit sends no response
// headers unless asked; neither does rls without response_headers.
func TestResponseHeadersOffByDefault(t *testing.T) {
	h := start(t, Config{}, compatRules(t), Options{})
	for i := range 5 {
		if resp := h.call(t, request("c", 0, desc("user", "h"))); len(resp.ResponseHeadersToAdd) != 0 {
			t.Fatalf("call %d: %v", i, resp.ResponseHeadersToAdd)
		}
	}
}

// TestUnlimitedRemaining: rate_limit {unlimited: true} answers
// limit_remaining 4294967295 and no current_limit, as
// envoyproxy/ratelimit does; a replaced descriptor answers a bare OK.
func TestUnlimitedRemaining(t *testing.T) {
	h := start(t, Config{}, compatRules(t), Options{})
	st := h.call(t, request("c", 0, desc("free", "x"))).Statuses[0]
	if st.Code != ok || st.LimitRemaining != math.MaxUint32 || st.CurrentLimit != nil || st.DurationUntilReset != nil {
		t.Fatalf("unlimited: %v", st)
	}
	h = start(t, Config{}, mustLoad(t, "testdata/replaces.yaml"), Options{})
	st = h.call(t, request("replaces", 0, desc("tenant", "zed"), desc("tenant_vip", "acme"))).Statuses[0]
	if st.Code != ok || st.LimitRemaining != 0 || st.CurrentLimit != nil {
		t.Fatalf("replaced: %v", st)
	}
}

// descriptors returns n one-entry descriptors, users u0, u1, ….
func descriptors(n int) []*commonrl.RateLimitDescriptor {
	ds := make([]*commonrl.RateLimitDescriptor, n)
	for i := range ds {
		ds[i] = desc("user", "u"+strconv.Itoa(i))
	}
	return ds
}

// TestRequestBounds: by default a request of more than 64 descriptors, a
// descriptor of more than 32 entries, or a message over 64 KiB is
// refused, with a message that names the bound.
func TestRequestBounds(t *testing.T) {
	h := start(t, Config{}, compatRules(t), Options{})
	if resp := h.call(t, request("c", 0, descriptors(64)...)); len(resp.Statuses) != 64 {
		t.Fatalf("64 descriptors: %d statuses", len(resp.Statuses))
	}
	long := make([]string, 0, 66)
	for i := range 33 {
		long = append(long, "k"+strconv.Itoa(i), "v")
	}
	if resp := h.call(t, request("c", 0, desc(long[:64]...))); len(resp.Statuses) != 1 {
		t.Fatalf("32 entries: %v", resp)
	}
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		code codes.Code
		want string
	}{
		{"65 descriptors", request("c", 0, descriptors(65)...), codes.InvalidArgument, "rls.max_descriptors (64)"},
		{"33 entries", request("c", 0, desc(long...)), codes.InvalidArgument, "descriptors[0].entries: 33, more than rls.max_entries (32)"},
		{"65 KiB", request("c", 0, desc("user", strings.Repeat("x", 65<<10))), codes.ResourceExhausted, ""},
	} {
		_, err := h.client.ShouldRateLimit(context.Background(), tc.req)
		if status.Code(err) != tc.code || !strings.Contains(status.Convert(err).Message(), tc.want) {
			t.Errorf("%s: %v, want %v %q", tc.name, err, tc.code, tc.want)
		}
	}
}

// TestManyDescriptorsShareBuckets: in a request of many descriptors (past
// the few a scan looks through) two with the same entries are still one
// bucket, charged both costs.
func TestManyDescriptorsShareBuckets(t *testing.T) {
	h := start(t, Config{}, compatRules(t), Options{})
	ds := append(descriptors(20), descriptors(20)...)
	resp := h.call(t, request("c", 0, ds...))
	for i, st := range resp.Statuses {
		if st.Code != ok || st.LimitRemaining != 1 {
			t.Fatalf("status %d: %v, want 1 of 3 left (two taken)", i, st)
		}
	}
	resp = h.call(t, request("c", 0, append(descriptors(20), desc("user", "u3"))...))
	if resp.OverallCode != over || resp.Statuses[3].Code != over || resp.Statuses[0].Code != ok || resp.Statuses[0].LimitRemaining != 1 {
		t.Fatalf("u3 twice: %v, want OVER_LIMIT by u3 alone", resp)
	}
	resp = h.call(t, request("c", 0, descriptors(20)...))
	for i, st := range resp.Statuses {
		if st.Code != ok || st.LimitRemaining != 0 {
			t.Fatalf("after the refusal, status %d: %v, want the last token (the refusal took none)", i, st)
		}
	}
}

// TestQuotaMode: envoyproxy/ratelimit's quota_mode rule on
// examples/ratelimit/config/example.yaml's quota pair: a quota over its
// limit says OVER_LIMIT but refuses the request only when every quota
// descriptor of it is over (or another descriptor is); the descriptors
// with room are charged. (Which, beside a limit with room, a lone quota
// always is: envoyproxy/ratelimit counts it among the quotas all over.)
func TestQuotaMode(t *testing.T) {
	rules := mustRules(t, Source{"q.yaml", []byte(`domain: q
descriptors:
  - {key: service, value: s1, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: service, value: s2, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: user, rate_limit: {unit: minute, requests_per_unit: 2}}
`)})
	h := start(t, Config{}, rules, Options{})
	runSteps(t, h, []step{
		{name: "both quotas have room", req: request("q", 0, desc("service", "s1"), desc("service", "s2")), overall: ok, codes: codesOf(ok, ok), remaining: rem(0, 1)},
		{name: "s1 over, s2 not: OK, s2 charged", req: request("q", 0, desc("service", "s1"), desc("service", "s2")), overall: ok, codes: codesOf(over, ok), remaining: rem(0, 0)},
		{name: "every quota over: refused", req: request("q", 0, desc("service", "s1"), desc("service", "s2")), overall: over, codes: codesOf(over, over), remaining: rem(0, 0)},
		{name: "a lone quota over: every quota over", req: request("q", 0, desc("service", "s1")), overall: over, codes: codesOf(over)},
		{name: "the only quota over beside a limit with room: every quota over", req: request("q", 0, desc("service", "s1"), desc("user", "u")), overall: over, codes: codesOf(over, ok)},
		{name: "the refused request charged the limit nothing", req: request("q", 0, desc("user", "u")), overall: ok, remaining: rem(1)},
		{name: "the limit's last token", req: request("q", 0, desc("user", "u")), overall: ok, remaining: rem(0)},
		{name: "the limit over refuses", req: request("q", 0, desc("user", "u")), overall: over, codes: codesOf(over)},
	})
}

// refusalRules mix quotas, checks, limits of zero and shadow mode, for
// the refusal rule's corners below.
func refusalRules(t testing.TB) *Rules {
	return mustRules(t, Source{"r.yaml", []byte(`domain: r
descriptors:
  - {key: q1, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}
  - {key: q2, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 5}}
  - {key: qzero, quota_mode: true, rate_limit: {unit: minute, requests_per_unit: 0}}
  - {key: qunl, quota_mode: true, rate_limit: {unlimited: true}}
  - {key: zero, rate_limit: {unit: minute, requests_per_unit: 0}}
  - {key: n, rate_limit: {unit: minute, requests_per_unit: 10}}
  - {key: sh, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}
`)})
}

// TestRefusalCharges: a refused request charges nothing and an admitted
// one charges its enforced descriptors with room, whichever verdicts
// (checks, limits of zero, quotas, unlimited quotas) decide it.
func TestRefusalCharges(t *testing.T) {
	h := start(t, Config{}, refusalRules(t), Options{})
	runSteps(t, h, []step{
		{name: "q1's one token", req: request("r", 0, desc("q1", "x")), overall: ok},
		{name: "the only quota, of zero, refuses: n not charged", req: request("r", 0, desc("qzero", "x"), desc("n", "x")), overall: over},
		{name: "n untouched", req: request("r", 0, desc("n", "x")), overall: ok, remaining: rem(9)},
		{name: "q1 over, q2 checked with room: admitted, n charged", req: request("r", 0, check("q2", "x"), desc("q1", "x"), desc("n", "x")), overall: ok, codes: codesOf(ok, over, ok)},
		{name: "n charged once", req: request("r", 0, desc("n", "x")), overall: ok, remaining: rem(7)},
		{name: "q1 checked over, q2 with room: admitted, q2 charged", req: request("r", 0, check("q1", "x"), desc("q2", "x")), overall: ok, codes: codesOf(over, ok)},
		{name: "q2 charged once", req: request("r", 0, desc("q2", "x")), overall: ok, remaining: rem(3)},
		{name: "an unlimited quota is no quota: q1 alone is every quota", req: request("r", 0, desc("q1", "x"), desc("qunl", "x")), overall: over},
	})

	// Under rls.shadow a request is answered OK, and charged as
	// enforcement would charge it: here, not at all.
	g := start(t, Config{Shadow: true}, refusalRules(t), Options{})
	runSteps(t, g, []step{
		{name: "shadow: zero would refuse", req: request("r", 0, desc("zero", "x"), desc("n", "x")), overall: ok, codes: codesOf(over, ok)},
		{name: "n not charged", req: request("r", 0, desc("n", "x")), overall: ok, remaining: rem(9)},
	})
}

// TestTakeOnlyStoreChargesOnce: on a store without TakeAll, a request a
// shadow descriptor alone would refuse charges its enforced descriptor
// once, not again in a second pass.
func TestTakeOnlyStoreChargesOnce(t *testing.T) {
	h := start(t, Config{}, refusalRules(t), Options{Store: takeOnly{ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{})}})
	for i := range 3 {
		h.call(t, request("r", 0, desc("sh", "x"), desc("n", "x")))
		if resp := h.call(t, request("r", 0, desc("n", "x"))); resp.Statuses[0].LimitRemaining != uint32(10-2*(i+1)) {
			t.Fatalf("round %d: n has %d left, want %d: charged twice", i, resp.Statuses[0].LimitRemaining, 10-2*(i+1))
		}
	}
}

// TestOverrideWindowBound: an override whose unit_multiplier makes a
// window the stores cannot hold is InvalidArgument, not a wrapped window.
func TestOverrideWindowBound(t *testing.T) {
	h := start(t, Config{}, refusalRules(t), Options{})
	for _, m := range []uint32{4294967295, 213504} {
		d := withOverride(5, typev3.RateLimitUnit_DAY, "n", "x")
		d.Limit.UnitMultiplier = wrapperspb.UInt32(m)
		_, err := h.client.ShouldRateLimit(t.Context(), request("r", 0, d))
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "unit_multiplier") {
			t.Errorf("unit_multiplier %d days: %v, want InvalidArgument naming it", m, err)
		}
	}
	if got := ceilSeconds(math.MaxInt64, 1); got != int64(math.MaxInt64/int64(time.Second))+1 {
		t.Errorf("ceilSeconds(the longest wait) = %d, want it saturated, not wrapped", got)
	}
}
