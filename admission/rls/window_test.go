package rls

import (
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"gopkg.in/yaml.v3"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/fakeclock"
	"github.com/fairgate/fairgate/internal/redistest"
)

// windowRules are 3 a minute each: user in fixed windows, flat in a
// token bucket, team as rls.window says; zero refuses all, in fixed
// windows.
var windowRules = Source{Name: "w.yaml", Data: []byte(`domain: w
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3, window: fixed}
  - key: flat
    rate_limit: {unit: minute, requests_per_unit: 3, window: bucket}
  - key: team
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: zero
    rate_limit: {unit: minute, requests_per_unit: 0, window: fixed}
`)}

func wreq(ds ...*commonrl.RateLimitDescriptor) *rlsv3.RateLimitRequest { return request("w", 0, ds...) }

// minuteTurn is three calls of d at 0:59 of a minute (the harness's clock
// starts on a whole minute) and a fourth, over; then at 1:00 three more
// and a fourth. In a fixed window the second three are a new window's;
// in a token bucket, 1 s brings back a twentieth of a token: all four
// are over.
func minuteTurn(d *commonrl.RateLimitDescriptor, fixed bool) []step {
	steps := []step{
		{name: "0:59 first", advance: 59 * time.Second, req: wreq(d), overall: ok, remaining: rem(2)},
		{name: "0:59 second", req: wreq(d), overall: ok, remaining: rem(1)},
		{name: "0:59 third", req: wreq(d), overall: ok, remaining: rem(0)},
	}
	if !fixed {
		return append(steps,
			step{name: "0:59 fourth", req: wreq(d), overall: over, remaining: rem(0), reset: resets(20 * time.Second)},
			step{name: "1:00 a bucket does not reset", advance: time.Second, req: wreq(d), overall: over, remaining: rem(0), reset: resets(19 * time.Second)})
	}
	steps[0].reset, steps[1].reset, steps[2].reset = resets(time.Second), resets(time.Second), resets(time.Second)
	return append(steps,
		step{name: "0:59 fourth", req: wreq(d), overall: over, codes: codesOf(over), remaining: rem(0), reset: resets(time.Second)},
		step{name: "1:00 first", advance: time.Second, req: wreq(d), overall: ok, remaining: rem(2), reset: resets(time.Minute)},
		step{name: "1:00 second", req: wreq(d), overall: ok, remaining: rem(1), reset: resets(time.Minute)},
		step{name: "1:00 third", req: wreq(d), overall: ok, remaining: rem(0), reset: resets(time.Minute)},
		step{name: "1:00 fourth", req: wreq(d), overall: over, remaining: rem(0), reset: resets(time.Minute)},
		// A refused call takes nothing: 4 is more than the window holds,
		// and the 3 after it still fit.
		step{name: "2:30 four at once", advance: 90 * time.Second, req: request("w", 4, d), overall: over, remaining: rem(0), reset: resets(30 * time.Second)},
		step{name: "2:30 three at once", req: request("w", 3, d), overall: ok, remaining: rem(0), reset: resets(30 * time.Second)},
	)
}

// TestFixedWindowDescriptor: a rate_limit's window: fixed admits its
// limit in each whole minute, answering the time to the minute's end,
// while a descriptor beside it stays a token bucket (rls.window unset).
func TestFixedWindowDescriptor(t *testing.T) {
	t.Run("window fixed", func(t *testing.T) {
		runSteps(t, start(t, Config{}, mustRules(t, windowRules), Options{}), minuteTurn(desc("user", "ann"), true))
	})
	t.Run("no window: bucket", func(t *testing.T) {
		runSteps(t, start(t, Config{}, mustRules(t, windowRules), Options{}), minuteTurn(desc("team", "red"), false))
	})
}

// TestFixedWindowDefault: rls.window: fixed makes every rate_limit
// without a window of its own a fixed window; a rate_limit's own
// window: bucket wins.
func TestFixedWindowDefault(t *testing.T) {
	cfg := Config{Window: WindowFixed}
	t.Run("no window: fixed", func(t *testing.T) {
		runSteps(t, start(t, cfg, mustRules(t, windowRules), Options{}), minuteTurn(desc("team", "red"), true))
	})
	t.Run("window bucket wins", func(t *testing.T) {
		runSteps(t, start(t, cfg, mustRules(t, windowRules), Options{}), minuteTurn(desc("flat", "x"), false))
	})
}

// TestFixedWindowOverride: a request-level override counts as its
// descriptor does: windows of unit × unit_multiplier (here 5 s, from a
// multiple of 5 s since the epoch) under rls.window: fixed; on a fixed
// descriptor, of the configured unit, it shares the window's count, so a
// higher limit admits what the configured one left (a token bucket would
// hold none); of another unit it counts apart, as envoyproxy/ratelimit
// keys a counter by its window.
func TestFixedWindowOverride(t *testing.T) {
	t.Run("unit_multiplier", func(t *testing.T) {
		h := start(t, Config{Window: WindowFixed}, mustRules(t, windowRules), Options{})
		d := func() *commonrl.RateLimitDescriptor {
			d := withOverride(2, typev3.RateLimitUnit_SECOND, "unknown", "k")
			d.Limit.UnitMultiplier = wrapperspb.UInt32(5)
			return d
		}
		runSteps(t, h, []step{
			{name: "0:03", advance: 3 * time.Second, req: wreq(d()), overall: ok, remaining: rem(1), reset: resets(2 * time.Second)},
			{name: "0:03 again", req: wreq(d()), overall: ok, remaining: rem(0), reset: resets(2 * time.Second)},
			{name: "0:04 over", advance: time.Second, req: wreq(d()), overall: over, remaining: rem(0), reset: resets(time.Second)},
			{name: "0:05 a new window", advance: time.Second, req: wreq(d()), overall: ok, remaining: rem(1), reset: resets(5 * time.Second)},
		})
		if m := h.call(t, wreq(d())).Statuses[0].GetCurrentLimit().GetUnitMultiplier().GetValue(); m != 5 {
			t.Errorf("current_limit.unit_multiplier %d, want 5", m)
		}
	})
	t.Run("raises a fixed descriptor", func(t *testing.T) {
		h := start(t, Config{}, mustRules(t, windowRules), Options{})
		runSteps(t, h, []step{
			{name: "the configured 3", advance: 10 * time.Second, req: request("w", 3, desc("user", "ann")), overall: ok, remaining: rem(0), reset: resets(50 * time.Second)},
			{name: "5 a minute: 2 left", req: wreq(withOverride(5, typev3.RateLimitUnit_MINUTE, "user", "ann")), overall: ok, remaining: rem(1), reset: resets(50 * time.Second)},
			{name: "the configured 3 again: over", req: wreq(desc("user", "ann")), overall: over, remaining: rem(0), reset: resets(50 * time.Second)},
		})
	})
	t.Run("another length counts apart", func(t *testing.T) {
		h := start(t, Config{}, mustRules(t, windowRules), Options{})
		hour := func() *commonrl.RateLimitDescriptor { return withOverride(5, typev3.RateLimitUnit_HOUR, "user", "ann") }
		runSteps(t, h, []step{
			{name: "the configured 3", advance: 10 * time.Second, req: request("w", 3, desc("user", "ann")), overall: ok, remaining: rem(0)},
			{name: "5 an hour: a count of its own", req: wreq(hour()), overall: ok, remaining: rem(4), reset: resets(time.Hour - 10*time.Second)},
			{name: "the minute's count is still full", req: wreq(desc("user", "ann")), overall: over, remaining: rem(0), reset: resets(50 * time.Second)},
			{name: "1:00 the minute's next window", advance: 50 * time.Second, req: wreq(desc("user", "ann")), overall: ok, remaining: rem(2)},
			{name: "the hour's count goes on", req: wreq(hour()), overall: ok, remaining: rem(3)},
		})
	})
}

// TestFixedWindowMixed: a request of a token bucket and a fixed window
// is charged all or nothing, whichever of them refuses it (the other's
// status tells its state, uncharged).
func TestFixedWindowMixed(t *testing.T) {
	h := start(t, Config{}, mustRules(t, windowRules), Options{})
	flat, user := func() *commonrl.RateLimitDescriptor { return desc("flat", "x") }, func() *commonrl.RateLimitDescriptor { return desc("user", "ann") }
	runSteps(t, h, []step{
		{name: "0:59 both", advance: 59 * time.Second, req: wreq(flat(), user()), overall: ok, remaining: rem(2, 2)},
		{name: "0:59 both again", req: wreq(flat(), user()), overall: ok, remaining: rem(1, 1)},
		{name: "0:59 both, the last", req: wreq(flat(), user()), overall: ok, remaining: rem(0, 0), reset: resets(time.Minute, time.Second)},
		// 1:00: a new window, but the bucket has a twentieth of a token.
		{name: "1:00 the bucket refuses", advance: time.Second, req: wreq(flat(), user()), overall: over, codes: codesOf(over, ok), remaining: rem(0, 3)},
		{name: "1:00 the window was not charged", req: wreq(user()), overall: ok, remaining: rem(2), reset: resets(time.Minute)},
		{name: "1:00 the window's last two", req: request("w", 2, user()), overall: ok, remaining: rem(0)},
		// 1:20: the bucket has a token again, the window none.
		{name: "1:20 the window refuses", advance: 20 * time.Second, req: wreq(flat(), user()), overall: over, codes: codesOf(ok, over), remaining: rem(1, 0)},
		{name: "1:20 the bucket was not charged", req: wreq(flat()), overall: ok, remaining: rem(0)},
	})
}

// TestFixedWindowChecksAndHeaders: a check (hits_addend 0) reads the
// window without charging it; the headers give the window's end as its
// reset and the unit as its length; a limit of zero waits for the
// window's end, as envoyproxy/ratelimit answers it.
func TestFixedWindowChecksAndHeaders(t *testing.T) {
	h := start(t, Config{ResponseHeaders: true}, mustRules(t, windowRules), Options{})
	runSteps(t, h, []step{
		{name: "a check on a fresh window", advance: 15 * time.Second, req: wreq(check("user", "ann")), overall: ok, remaining: rem(3), reset: resets(45 * time.Second)},
		{name: "three", req: request("w", 3, desc("user", "ann")), overall: ok, remaining: rem(0), reset: resets(45 * time.Second)},
		{name: "a check on a spent window", req: wreq(check("user", "ann")), overall: over, codes: codesOf(over), remaining: rem(0), reset: resets(45 * time.Second)},
		{name: "zero", req: wreq(desc("zero", "z")), overall: over, remaining: rem(0), reset: resets(45 * time.Second)},
	})
	resp := h.call(t, wreq(desc("user", "ann")))
	checkHeaders(t, resp, map[string]string{
		"RateLimit-Policy": `"user";q=3;w=60`, "RateLimit": `"user";r=0;t=45`,
		"RateLimit-Reset": "45", "RateLimit-Remaining": "0", "Retry-After": "45",
	})
	h.clock.Advance(45 * time.Second)
	runSteps(t, h, []step{{name: "1:00 a check", req: wreq(check("user", "ann")), overall: ok, remaining: rem(3), reset: resets(time.Minute)}})
}

// TestFixedWindowShadowAndNear: under rls.shadow a window over its limit
// answers OK and is not charged past it, so the next window starts full;
// near_limit counts the calls that leave the window past the ratio.
func TestFixedWindowShadowAndNear(t *testing.T) {
	reg := prometheus.NewRegistry()
	tel, err := NewTelemetry(TelemetryOptions{Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	h := start(t, Config{Shadow: true}, mustRules(t, windowRules), Options{Telemetry: tel})
	user := desc("user", "ann")
	var steps []step
	for i := range 3 {
		steps = append(steps, step{name: "0:30", req: wreq(user), overall: ok, remaining: rem(int64(2 - i))})
	}
	steps[0].advance = 30 * time.Second
	steps = append(steps,
		step{name: "0:30 over, in shadow", req: wreq(user), overall: ok, codes: codesOf(over), remaining: rem(0), reset: resets(30 * time.Second)},
		step{name: "1:00", advance: 30 * time.Second, req: wreq(user), overall: ok, codes: codesOf(ok), remaining: rem(2), reset: resets(time.Minute)})
	runSteps(t, h, steps)
	// ⌊0.8 × 3⌋ = 2: the third call of 0:30 only; 1:00's first is a new
	// window's (a bucket would still be past the ratio).
	if n := testutil.ToFloat64(tel.near.WithLabelValues("w", "user")); n != 1 {
		t.Errorf("near_limit %v, want 1", n)
	}
}

// TestWindowConfig: window is read in a rate_limit and in the rls
// section; an unknown word, a window elsewhere and a window beside
// unlimited: true are refused, naming the file and the field.
func TestWindowConfig(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown word", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, window: fix}\n",
			`f.yaml: descriptors[0].rate_limit.window: line 4: unknown window "fix" (want fixed or bucket)`},
		{"any case is not", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      window: Fixed\n",
			`f.yaml: descriptors[0].rate_limit.window: line 6: unknown window "Fixed" (want fixed or bucket)`},
		{"not a word", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, window: [fixed]}\n",
			`f.yaml: descriptors[0].rate_limit.window: line 4: want fixed or bucket`},
		{"beside key", "domain: d\ndescriptors:\n  - key: a\n    window: fixed\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			`f.yaml: descriptors[0].window: line 4: "window" belongs in rate_limit: move it there`},
		{"unlimited", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, window: fixed}\n",
			"f.yaml: descriptors[0].rate_limit.window: an unlimited rate limit has no window: delete window, or unlimited: true"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRules(Source{Name: "f.yaml", Data: []byte(tc.yaml)})
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got  %v\nwant %s", err, tc.want)
			}
		})
	}
	r := mustRules(t, windowRules, Source{Name: "n.yaml", Data: []byte("domain: n\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, window: ~}\n")})
	for _, c := range []struct {
		domain, key string
		want        Window
	}{{"w", "user", WindowFixed}, {"w", "flat", WindowBucket}, {"w", "team", WindowDefault}, {"n", "a", WindowDefault}} {
		if got := r.domains[c.domain].byKey[c.key].limit.mode; got != c.want {
			t.Errorf("%s %s: window %v, want %v", c.domain, c.key, got, c.want)
		}
	}

	var cfg Config
	if err := yaml.Unmarshal([]byte("window: fixed\n"), &cfg); err != nil || cfg.Window != WindowFixed {
		t.Errorf("rls.window: fixed: %v, %v", cfg.Window, err)
	}
	if err := yaml.Unmarshal([]byte("window: fixd\n"), &cfg); err == nil || !strings.Contains(err.Error(), `unknown window "fixd" (want fixed or bucket)`) {
		t.Errorf("rls.window: fixd: %v", err)
	}
	bad := Config{Configs: []string{"x"}, Window: WindowFixed + 1}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "rls.window: Window(3) is not fixed or bucket") {
		t.Errorf("Validate: %v", err)
	}
}

// TestFixedWindowEndedInFlight: a call whose instant is in a window the
// store, on its own clock, has already seen end (and not yet forgotten)
// still counts that window (the instant chose it): spent, it refuses the
// call, though its wait is zero, and the request of two descriptors is
// refused, not admitted uncharged.
func TestFixedWindowEndedInFlight(t *testing.T) {
	clock := fakeclock.New()
	store := ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{Now: clock.Now, SweepInterval: time.Hour})
	behind := func() time.Time { return clock.Now().Add(-time.Millisecond) }
	h := start(t, Config{}, mustRules(t, windowRules), Options{Store: store, Now: behind})
	h.clock = clock
	runSteps(t, h, []step{
		{name: "0:59 the window's three", advance: 59 * time.Second, req: request("w", 3, desc("user", "ann")), overall: ok, remaining: rem(0)},
		{name: "1:00.0005, 0:59.9995 to the service", advance: time.Second + 500*time.Microsecond,
			req: wreq(desc("flat", "x"), desc("user", "ann")), overall: over, codes: codesOf(ok, over), remaining: rem(3, 0), reset: resets(0, 0)},
		{name: "1:00.0015: the next window", advance: time.Millisecond, req: wreq(desc("user", "ann")), overall: ok, remaining: rem(2)},
	})
}

// TestFixedWindowRedis: the windows on the Redis store, whose script
// counts to the end the service's clock chose. The fake clock moves the
// windows; it starts a day ahead of Redis's clock, so that no window's
// key expires (at its end, by Redis's clock) before the window is done.
// The waits are Redis's clock's, so they are not compared here, nor is
// anything that needs a bucket to refill.
func TestFixedWindowRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	clock := &fakeclock.Clock{}
	clock.Advance(time.Duration(time.Now().Add(24 * time.Hour).Truncate(time.Minute).UnixNano()))
	h := start(t, Config{}, mustRules(t, windowRules), Options{Store: newRedisStore(t, srv.Addr()), Now: clock.Now})
	h.clock = clock
	steps := minuteTurn(desc("user", "ann"), true)
	flat, user := desc("flat", "x"), desc("user", "bo")
	steps = append(steps,
		step{name: "bo's window spent", req: request("w", 3, user), overall: ok, remaining: rem(0)},
		step{name: "the window refuses", req: wreq(flat, user), overall: over, codes: codesOf(ok, over), remaining: rem(3, 0)},
		step{name: "the bucket's three", req: request("w", 3, flat), overall: ok, remaining: rem(0)},
		step{name: "3:00 the bucket refuses", advance: 30 * time.Second, req: wreq(flat, user), overall: over, codes: codesOf(over, ok), remaining: rem(0, 3)},
		step{name: "3:00 the window was not charged", req: request("w", 3, user), overall: ok, remaining: rem(0)},
	)
	for i := range steps {
		steps[i].reset = nil
	}
	runSteps(t, h, steps)
}
