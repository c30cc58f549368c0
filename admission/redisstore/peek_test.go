package redisstore

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/redistest"
)

// refPeek is what ref says a take of t.Cost alone would be told at now
// (Unix ns), charging nothing: a refused take changes nothing, so the
// tokens are those of a take of more than the burst, and the whole
// Result, when t.Cost is lacking, that of a take of t.Cost.
func refPeek(t *testing.T, ref *ratelimit.MemoryStore, now int64, tk ratelimit.Take) ratelimit.Result {
	t.Helper()
	take := func(cost float64) ratelimit.Result {
		t.Helper()
		res := make([]ratelimit.Result, 1)
		probe := tk
		probe.Cost = cost
		if err := ref.TakeAllAt(now, []ratelimit.Take{probe}, res); err != nil {
			t.Fatal(err)
		}
		if res[0].Allowed {
			t.Fatalf("reference probe of %v (%+v) was charged", cost, tk)
		}
		return res[0]
	}
	all := take(tk.Limit.Burst + 1)
	if all.Remaining < tk.Cost {
		return take(tk.Cost)
	}
	return ratelimit.Result{Allowed: true, Remaining: all.Remaining, ResetAfter: all.ResetAfter}
}

// TestPeekMatchesReference runs a seeded stream of TakeAlls over one
// tenant's buckets and fixed windows through the scripts and the
// embedded store (matchReference), and between them peeks at random
// takes (a bucket twice, costs of zero) at the instant peek.lua read from
// Redis's clock: each result must be the embedded store's for a take of
// its cost alone, and a peek must write nothing.
func TestPeekMatchesReference(t *testing.T) {
	srv := redistest.StartServer(t)
	s := windowStore(t, []string{srv.Addr()}, nil)
	ref := ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{SweepInterval: time.Hour, Now: func() time.Time { return time.Unix(0, 0) }})
	rng := rand.New(rand.NewPCG(31, 32))
	base := redisClock(t, s).Truncate(time.Second).Add(time.Hour)
	key := func(scope string) ratelimit.BucketKey { return ratelimit.BucketKey{Tenant: "peeks", Scope: scope} }
	writes := func() float64 {
		return commandStat(t, srv.Addr(), "set", "calls") + commandStat(t, srv.Addr(), "del", "calls")
	}
	minute := 1
	var stats struct{ peeks, lacking, windowLacking, unseen, writes int }
	for step := range 300 {
		if rng.IntN(8) == 0 {
			minute++
		}
		all := []ratelimit.Take{
			{Key: key(""), Limit: ratelimit.Limit{Rate: 2000, Burst: 10}},
			{Key: key("export"), Limit: ratelimit.Limit{Rate: 40, Burst: 3}},
			{Key: key("minute"), Limit: windowOf(6, base.Add(time.Duration(minute)*time.Minute))},
			{Key: key("daily"), Limit: windowOf(12.5, base.Add(24*time.Hour))},
			{Key: key("unseen"), Limit: ratelimit.Limit{Rate: 1, Burst: 4}},
			{Key: key("unseen-window"), Limit: windowOf(2, base.Add(time.Hour))},
		}
		var takes []ratelimit.Take
		for _, i := range rng.Perm(4)[:1+rng.IntN(2)] {
			tk := all[i]
			tk.Cost = []float64{0.5, 1, 2.5}[rng.IntN(3)]
			takes = append(takes, tk)
		}
		matchReference(t, s, ref, step, takes)

		var peeks []ratelimit.Take
		for range 1 + rng.IntN(4) {
			tk := all[rng.IntN(len(all))] // a bucket may come twice
			tk.Cost = []float64{0, 1, 2.5}[rng.IntN(3)]
			peeks = append(peeks, tk)
		}
		got := make([]ratelimit.Result, len(peeks))
		before := writes()
		nowUS, err := s.peekRedis(context.Background(), peeks, got)
		if err != nil {
			t.Fatalf("step %d: peek: %v", step, err)
		}
		stats.writes += int(writes() - before)
		for i, tk := range peeks {
			want := refPeek(t, ref, nowUS*1000, tk)
			if got[i] != want {
				t.Fatalf("step %d peek %d (%+v) at %dµs:\n got %+v\nwant %+v", step, i, tk, nowUS, got[i], want)
			}
			stats.peeks++
			if !got[i].Allowed {
				stats.lacking++
				if tk.Limit.Fixed() {
					stats.windowLacking++
				}
			}
			if tk.Key.Scope == "unseen" || tk.Key.Scope == "unseen-window" {
				stats.unseen++
				if got[i].Remaining != tk.Limit.Burst {
					t.Fatalf("step %d: a bucket never taken from: %+v, want its burst", step, got[i])
				}
			}
		}
	}
	t.Logf("%+v", stats)
	if stats.writes != 0 {
		t.Errorf("peeks wrote %d times, want never", stats.writes)
	}
	for _, scope := range []string{"unseen", "unseen-window"} {
		if n, err := s.client.Exists(context.Background(), bucketKey(key(scope)), windowKey(key(scope))).Result(); err != nil || n != 0 {
			t.Errorf("%s: EXISTS %v, %v; want no key", scope, n, err)
		}
	}
	if stats.lacking == 0 || stats.windowLacking == 0 || stats.unseen == 0 || stats.lacking == stats.peeks {
		t.Errorf("the stream tests too little: %+v", stats)
	}
}

// TestPeekChargesNothing: through Peek (one script call for a bucket and
// a window), an emptied bucket and window read as empty, with the waits
// a take would be told, and their keys' values and TTLs are unchanged;
// keys never written stay so.
func TestPeekChargesNothing(t *testing.T) {
	srv := redistest.StartServer(t)
	s := windowStore(t, []string{srv.Addr()}, nil)
	ctx := context.Background()
	end := redisClock(t, s).Add(time.Hour)
	bucket := ratelimit.Take{Key: ratelimit.BucketKey{Tenant: "acme", Scope: "b"}, Limit: ratelimit.Limit{Rate: 3.0 / 60, Burst: 3}, Cost: 1}
	window := ratelimit.Take{Key: ratelimit.BucketKey{Tenant: "acme", Scope: "w"}, Limit: windowOf(3, end), Cost: 1}
	peek := func() []ratelimit.Result {
		t.Helper()
		res := make([]ratelimit.Result, 2)
		if err := s.Peek(ctx, []ratelimit.Take{bucket, window}, res); err != nil {
			t.Fatalf("Peek: %v", err)
		}
		return res
	}
	if res := peek(); !res[0].Allowed || res[0].Remaining != 3 || !res[1].Allowed || res[1].Remaining != 3 {
		t.Fatalf("never taken from: %+v, want 3 and 3", res)
	}
	if n, err := s.client.Exists(ctx, bucketKey(bucket.Key), windowKey(window.Key), bucketKey(window.Key)).Result(); err != nil || n != 0 {
		t.Fatalf("after a peek of buckets never seen: EXISTS %v, %v; want no key", n, err)
	}
	for range 3 {
		if _, err := s.TakeAll(ctx, []ratelimit.Take{bucket, window}); err != nil {
			t.Fatal(err)
		}
	}
	keys := []string{bucketKey(bucket.Key), windowKey(window.Key)}
	state := func() (vals []string, ttls []time.Duration) {
		t.Helper()
		for _, k := range keys {
			v, err := s.client.Get(ctx, k).Result()
			if err != nil {
				t.Fatalf("GET %s: %v", k, err)
			}
			ttl, err := s.client.PTTL(ctx, k).Result()
			if err != nil {
				t.Fatalf("PTTL %s: %v", k, err)
			}
			vals, ttls = append(vals, v), append(ttls, ttl)
		}
		return vals, ttls
	}
	vals, ttls := state()
	calls := scriptCalls(t, srv)
	res := peek()
	if got := scriptCalls(t, srv) - calls; got != 1 {
		t.Errorf("a peek at a bucket and a window: %d script calls, want 1", got)
	}
	if b := res[0]; b.Allowed || b.Remaining >= 1 || b.RetryAfter <= 0 || b.RetryAfter > 20*time.Second || b.ResetAfter < b.RetryAfter || b.ResetAfter > time.Minute {
		t.Errorf("emptied bucket: %+v, want refused, a wait of at most 20 s and a reset within a minute", b)
	}
	if w := res[1]; w.Allowed || w.Remaining != 0 || w.RetryAfter != w.ResetAfter || w.ResetAfter <= 59*time.Minute || w.ResetAfter > time.Hour {
		t.Errorf("emptied window: %+v, want refused until its end, about an hour away", w)
	}
	vals2, ttls2 := state()
	for i, k := range keys {
		if vals2[i] != vals[i] || ttls2[i] > ttls[i] {
			t.Errorf("%s after a peek: %q PTTL %v; before %q PTTL %v: want unchanged", k, vals2[i], ttls2[i], vals[i], ttls[i])
		}
	}
}

// TestPeekSync: a synced bucket whose view is fresh is read from it,
// with what this instance took and has not pushed, and without a script
// call; one without a view here is read from Redis.
func TestPeekSync(t *testing.T) {
	srv := redistest.StartServer(t)
	s := windowStore(t, []string{srv.Addr()}, func(c *Config) { c.Mode, c.SyncInterval = Sync, time.Minute })
	exact := windowStore(t, []string{srv.Addr()}, nil)
	ctx := context.Background()
	l := ratelimit.Limit{Rate: 1.0 / 3600, Burst: 10}
	viewed := ratelimit.Take{Key: ratelimit.BucketKey{Tenant: "t", Scope: "viewed"}, Limit: l, Cost: 1}
	other := ratelimit.Take{Key: ratelimit.BucketKey{Tenant: "t", Scope: "other"}, Limit: l, Cost: 1}
	for range 3 {
		if r, err := s.Take(ctx, viewed.Key, l, 1); err != nil || !r.Allowed {
			t.Fatalf("synced take: %+v %v", r, err)
		}
	}
	for range 4 {
		if r, err := exact.Take(ctx, other.Key, l, 1); err != nil || !r.Allowed {
			t.Fatalf("exact take: %+v %v", r, err)
		}
	}
	calls := scriptCalls(t, srv)
	res := make([]ratelimit.Result, 1)
	if err := s.Peek(ctx, []ratelimit.Take{viewed}, res); err != nil {
		t.Fatal(err)
	}
	// Redis still holds 10 or 9: the takes after the first view's are not
	// pushed within the minute's interval.
	if math.Abs(res[0].Remaining-7) > 0.01 || res[0].StateUnknown {
		t.Errorf("fresh view: %+v, want 7 left (3 taken here)", res[0])
	}
	if got := scriptCalls(t, srv) - calls; got != 0 {
		t.Errorf("a peek of a fresh view: %d script calls, want none", got)
	}
	res = make([]ratelimit.Result, 2)
	if err := s.Peek(ctx, []ratelimit.Take{other, viewed}, res); err != nil {
		t.Fatal(err)
	}
	if math.Abs(res[0].Remaining-6) > 0.01 || math.Abs(res[1].Remaining-7) > 0.01 {
		t.Errorf("no view, then a fresh one: %+v, want 6 (Redis) and 7 (the view)", res)
	}
}

// TestPeekErrors: invalid peeks, a closed store and a Redis that does not
// answer are errors, under any failure policy: no policy decides a peek.
func TestPeekErrors(t *testing.T) {
	srv := redistest.StartServer(t)
	s := windowStore(t, []string{srv.Addr()}, func(c *Config) { c.FailurePolicy = FailOpen })
	ctx := context.Background()
	k := ratelimit.BucketKey{Tenant: "t"}
	l := ratelimit.Limit{Rate: 1, Burst: 1}
	res := make([]ratelimit.Result, 2)
	for name, takes := range map[string][]ratelimit.Take{
		"none":         nil,
		"cost below 0": {{Key: k, Limit: l, Cost: -1}},
		"infinite":     {{Key: k, Limit: l, Cost: math.Inf(1)}},
		"NaN rate":     {{Key: k, Limit: ratelimit.Limit{Rate: math.NaN(), Burst: 1}}},
		"two tenants":  {{Key: k, Limit: l}, {Key: ratelimit.BucketKey{Tenant: "u"}, Limit: l}},
		"res too short": {{Key: k, Limit: l}, {Key: ratelimit.BucketKey{Tenant: "t", Scope: "a"}, Limit: l},
			{Key: ratelimit.BucketKey{Tenant: "t", Scope: "b"}, Limit: l}},
	} {
		if err := s.Peek(ctx, takes, res); !errors.Is(err, ErrInvalidTake) {
			t.Errorf("%s: %v, want ErrInvalidTake", name, err)
		}
	}
	if err := s.Peek(ctx, []ratelimit.Take{{Key: k, Limit: l}, {Key: k, Limit: l, Cost: 1}}, res); err != nil {
		t.Errorf("one bucket twice, costs 0 and 1: %v", err)
	}
	srv.Kill()
	if err := s.Peek(ctx, []ratelimit.Take{{Key: k, Limit: l, Cost: 1}}, res); err == nil || errors.Is(err, ErrInvalidTake) {
		t.Errorf("Redis down, fail_open: %v, want Redis's error", err)
	}
	_ = s.Close()
	if err := s.Peek(ctx, []ratelimit.Take{{Key: k, Limit: l}}, res); !errors.Is(err, ErrClosed) {
		t.Errorf("closed: %v, want ErrClosed", err)
	}
}
