package redisstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/redistest"
)

// TestRelimitDoesNotRefill (issue 12): a reload that lowered a rate
// brought a just-emptied bucket back full, because its key expired at the
// instant the bucket was full at the old rate. Each tenant empties a bucket
// of 50 at 1000 tokens/s (full again in 50 ms) and a group bucket beside
// it; a reload lowers both to 0.5/s (full in 100 s). After 100 ms, the
// relimited buckets hold what refilled at 0.5/s (less than a token
// for 2 s, ample slack for a slow machine); a tenant the reload
// is not told about (the control: today's behaviour without Relimit) is
// full again. On a single node and on a cluster, whose tenants live on
// different masters.
func TestRelimitDoesNotRefill(t *testing.T) {
	for _, tc := range []struct {
		name  string
		addrs func(t *testing.T) []string
	}{
		{"single", func(t *testing.T) []string { return []string{redistest.StartServer(t).Addr()} }},
		{"cluster", func(t *testing.T) []string { return redistest.StartCluster(t).Addrs() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore(t, tc.addrs(t), func(c *Config) { c.Timeout = time.Second; c.FailurePolicy = FailClosed; c.DenyCacheSize = -1 }, Options{})
			ctx := context.Background()
			before := ratelimit.Limit{Rate: 1000, Burst: 50}
			after := ratelimit.Limit{Rate: 0.5, Burst: 50}
			const tenants = 6 // the last is the control
			takes := func(tn int, l ratelimit.Limit, cost float64) []ratelimit.Take {
				id := fmt.Sprintf("relimit-%d", tn)
				return []ratelimit.Take{
					{Key: ratelimit.BucketKey{Tenant: id, Scope: "exports"}, Limit: l, Cost: cost},
					{Key: ratelimit.BucketKey{Tenant: id}, Limit: l, Cost: cost},
				}
			}
			limits := map[ratelimit.BucketKey]ratelimit.Limit{}
			for tn := range tenants {
				mustTakeAll(t, s, takes(tn, before, before.Burst), true)
				if tn < tenants-1 {
					for _, tk := range takes(tn, after, 1) {
						limits[tk.Key] = tk.Limit
					}
				}
			}
			if err := s.Relimit(ctx, limits); err != nil {
				t.Fatalf("Relimit: %v", err)
			}
			for k := range limits {
				if ms := pttl(t, s, k); ms < 90000 {
					t.Errorf("%v: PTTL %d ms after the reload, want about 100 s (full at 0.5/s)", k, ms)
				}
			}
			// A take decided under the old limit and answered after the
			// reload must not bring the early expiry back. (5 ms: a token
			// at the old rate.)
			time.Sleep(5 * time.Millisecond)
			mustTakeAll(t, s, takes(0, before, 1), true)
			if ms := pttl(t, s, takes(0, before, 1)[1].Key); ms < 90000 {
				t.Errorf("PTTL %d ms after a late take under the old limit, want about 100 s", ms)
			}
			// Past the instant the buckets are full at the old rate.
			// Redis's clock decides (TIME) and cannot be faked: wait.
			time.Sleep(100 * time.Millisecond)
			for tn := 1; tn < tenants-1; tn++ { // 0 took under the old limit
				res := mustTakeAll(t, s, takes(tn, after, 1), false)
				for i, r := range res {
					if r.Remaining > 1 {
						t.Errorf("tenant %d bucket %d: %v tokens 100 ms after the reload, want < 1 (0.5/s from empty)", tn, i, r.Remaining)
					}
				}
			}
			res := mustTakeAll(t, s, takes(tenants-1, after, 1), true)
			if got := res[1].Remaining; got != after.Burst-1 {
				t.Errorf("control: %v tokens left, want %v: a key that expired is a full bucket (else the test proves nothing)", got, after.Burst-1)
			}
		})
	}
}

// TestRelimitReadsOldValues: a bucket written as '<dd' (before the key's
// expiry was kept in its value) is relimited too.
func TestRelimitReadsOldValues(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.Timeout = time.Second }, Options{})
	ctx := context.Background()
	k := ratelimit.BucketKey{Tenant: "old"}
	if err := s.client.Eval(ctx, "local t=redis.call('TIME'); local now=tonumber(t[1])*1000000+tonumber(t[2]); "+
		"redis.call('SET', KEYS[1], struct.pack('<dd', 0, now), 'PX', 50); return 1", []string{bucketKey(k)}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Relimit(ctx, map[ratelimit.BucketKey]ratelimit.Limit{k: {Rate: 5, Burst: 50}}); err != nil {
		t.Fatal(err)
	}
	if ms := pttl(t, s, k); ms < 9000 {
		t.Errorf("PTTL %d ms, want about 10 s", ms)
	}
}

// mustTakeAll takes takes, failing t on an error or when the decision is
// not allowed.
func mustTakeAll(t *testing.T, s *Store, takes []ratelimit.Take, allowed bool) []ratelimit.Result {
	t.Helper()
	res, out, err := s.DecideAll(context.Background(), takes)
	if err != nil || out.Source != FromRedis {
		t.Fatalf("TakeAll(%v): %+v, %v", takes[0].Key, out, err)
	}
	if res[0].Allowed != allowed {
		t.Fatalf("TakeAll(%v): %+v, want allowed %v", takes[0].Key, res, allowed)
	}
	return res
}

// pttl returns the PTTL of k's key in ms, failing t when it has none.
func pttl(t *testing.T, s *Store, k ratelimit.BucketKey) int64 {
	t.Helper()
	d, err := s.client.PTTL(context.Background(), bucketKey(k)).Result()
	if err != nil || d <= 0 {
		t.Fatalf("PTTL %v = %v, %v; want a TTL", k, d, err)
	}
	return d.Milliseconds()
}

// TestRelimitAfterScriptFlush: a node that lost its scripts between the
// load and the pipeline (restarted, flushed) gets them again by EVAL.
func TestRelimitAfterScriptFlush(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.Timeout = time.Second; c.FailurePolicy = FailClosed }, Options{})
	k := ratelimit.BucketKey{Tenant: "flushed"}
	mustTakeAll(t, s, []ratelimit.Take{{Key: k, Limit: ratelimit.Limit{Rate: 1000, Burst: 50}, Cost: 50}}, true)
	if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	calls, err := relimitCalls(map[ratelimit.BucketKey]ratelimit.Limit{k: {Rate: 5, Burst: 50}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.relimitPipelined(context.Background(), calls); err != nil {
		t.Fatalf("relimit after SCRIPT FLUSH: %v", err)
	}
	if ms := pttl(t, s, k); ms < 9000 {
		t.Errorf("PTTL %d ms, want about 10 s", ms)
	}
	if err := s.Relimit(context.Background(), map[ratelimit.BucketKey]ratelimit.Limit{k: {Rate: 0, Burst: 50}}); !errors.Is(err, ErrInvalidTake) {
		t.Errorf("Relimit to rate 0: %v, want ErrInvalidTake", err)
	}
}
