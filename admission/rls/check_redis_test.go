package rls

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fairgate/fairgate/internal/redistest"
)

// checkRules limits user to 3 a minute (a bucket, unless rls.window) and
// team to 3 an hour in fixed windows: a minute's window could end while
// the test runs.
var checkRules = Source{"c.yaml", []byte("domain: c\ndescriptors:\n" +
	"  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 3}\n" +
	"  - key: team\n    rate_limit: {unit: hour, requests_per_unit: 3, window: fixed}\n")}

// checkOf is a request whose one descriptor, key=value, is a check (its
// own hits_addend 0).
func checkOf(key, value string) *rlsv3.RateLimitRequest {
	d := desc(key, value)
	d.HitsAddend = wrapperspb.UInt64(0)
	return request("c", 0, d)
}

// redisState is the buckets' and windows' keys (the strings) on the
// server at addr with their values and TTLs, one "key value ttl" line
// each, sorted. TTL counts whole seconds, PTTL's rounded: a check that
// moved a key's expiry by the time it took would go unseen, one that
// reset it would not.
func redisState(t *testing.T, addr string) []string {
	t.Helper()
	out, err := redistest.Do(addr, "KEYS", "*")
	if err != nil {
		t.Fatal(err)
	}
	var state []string
	for _, k := range strings.Fields(out) {
		if typ, err := redistest.Do(addr, "TYPE", k); err != nil || typ != "string" {
			continue // the store's membership, not a bucket
		}
		v, err := redistest.Do(addr, "GET", k)
		if err != nil {
			t.Fatalf("GET %s: %v", k, err)
		}
		ttl, err := redistest.Do(addr, "TTL", k)
		if err != nil {
			t.Fatalf("TTL %s: %v", k, err)
		}
		state = append(state, k+" "+v+" "+ttl)
	}
	slices.Sort(state)
	return state
}

// TestCheckOnRedis: on the Redis store a check reads the bucket (or the
// window) and charges nothing: on a bucket never seen it is OK with the
// whole limit and writes no key; after a charge, OK with what is left;
// after three, OVER_LIMIT with nothing left and a wait; and no check
// changes a key's value or TTL. When Redis stops answering, a check is
// OK without state, also under fail_closed. Before, a check on Redis was
// OK without state whatever the bucket held.
func TestCheckOnRedis(t *testing.T) {
	for _, tc := range []struct {
		name, key string
		cfg       Config
		reset     time.Duration // the longest duration_until_reset when over
	}{
		{"bucket", "user", Config{}, time.Minute},
		{"fixed window", "team", Config{}, time.Hour},
		{"rls.window fixed", "user", Config{Window: WindowFixed}, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			// Frozen a minute before the hour's end at the latest, so
			// that the windows do not end while the test runs.
			now := time.Now()
			if end := now.Truncate(time.Hour).Add(time.Hour); end.Sub(now) < 2*time.Minute {
				now = end
			}
			if tc.cfg.Window == WindowFixed && now.Sub(now.Truncate(time.Minute)) > 50*time.Second {
				now = now.Truncate(time.Minute).Add(time.Minute)
			}
			h := start(t, tc.cfg, mustRules(t, checkRules), Options{Store: newRedisStore(t, srv.Addr()), Now: func() time.Time { return now }})
			charge := func(want string) {
				t.Helper()
				if resp := h.call(t, request("c", 0, desc(tc.key, "ann"))); resp.OverallCode.String() != want {
					t.Fatalf("charge: %v, want %s", resp, want)
				}
			}
			check := func(value, want string, remaining uint32) {
				t.Helper()
				before := redisState(t, srv.Addr())
				resp := h.call(t, checkOf(tc.key, value))
				st := resp.Statuses[0]
				if resp.OverallCode.String() != want || st.CurrentLimit == nil || st.LimitRemaining != remaining {
					t.Fatalf("check of %s: %v, want %s with %d left", value, resp, want, remaining)
				}
				if d := st.DurationUntilReset.AsDuration(); want == "OVER_LIMIT" && (d <= 0 || d > tc.reset) {
					t.Errorf("check of %s: duration_until_reset %v, want within (0, %v]", value, d, tc.reset)
				}
				if after := redisState(t, srv.Addr()); !slices.Equal(after, before) {
					t.Errorf("check of %s wrote:\nbefore %q\nafter  %q", value, before, after)
				}
			}
			check("bo", "OK", 3)
			if keys := redisState(t, srv.Addr()); len(keys) != 0 {
				t.Fatalf("a check of a bucket never seen wrote %q", keys)
			}
			charge("OK")
			check("ann", "OK", 2)
			charge("OK")
			charge("OK")
			check("ann", "OVER_LIMIT", 0)
			check("ann", "OVER_LIMIT", 0)
			charge("OVER_LIMIT")

			srv.Kill()
			resp, err := h.client.ShouldRateLimit(context.Background(), checkOf(tc.key, "ann"))
			if err != nil || resp.OverallCode.String() != "OK" || resp.Statuses[0].CurrentLimit != nil {
				t.Fatalf("Redis down, fail_closed: %v %v; want OK without state", resp, err)
			}
		})
	}
}
