package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/redistest"
)

// windowOf returns the fixed window of burst tokens ending at end, with
// the nominal rate of an hour's window: decided as a bucket, it would
// refill a token in 3600/burst seconds and know nothing of end.
func windowOf(burst float64, end time.Time) ratelimit.Limit {
	return ratelimit.Limit{Rate: burst / 3600, Burst: burst, End: end.UnixNano()}
}

// redisClock returns the time on Redis's clock (TIME), which the scripts
// decide with.
func redisClock(t *testing.T, s *Store) time.Time {
	t.Helper()
	now, err := s.client.Time(context.Background()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	return now
}

// decideBetween runs decide and returns Redis's clock just before and
// just after it: the script's now lies between.
func decideBetween(t *testing.T, s *Store, decide func()) (before, after time.Time) {
	t.Helper()
	before = redisClock(t, s)
	decide()
	return before, redisClock(t, s)
}

// checkUntil fails t unless d is the time until end from an instant
// between before and after (µs, Redis's unit, rounded either way).
func checkUntil(t *testing.T, what string, d time.Duration, end, before, after time.Time) {
	t.Helper()
	lo, hi := end.Sub(after)-time.Microsecond, end.Sub(before)+time.Microsecond
	if d < lo || d > hi {
		t.Errorf("%s = %v, want the time until the window's end, within [%v, %v]", what, d, lo, hi)
	}
}

// windowStore is a store for these tests: no denial cache, a long
// timeout, then edit's changes (nil: none).
func windowStore(t *testing.T, addrs []string, edit func(*Config)) *Store {
	return newTestStore(t, addrs, func(c *Config) {
		c.Timeout, c.DenyCacheSize = time.Second, -1
		if edit != nil {
			edit(c)
		}
	}, Options{})
}

// TestWindowAdmitsBurstPerWindow: a window admits its burst, refuses
// after, and says how long until its end (RetryAfter = ResetAfter); the
// next window (a larger End) starts full, and a take decided late, for
// the window that gave way, counts in the next. Its state is under a key
// of its own that expires at the end; the bucket key is never written, and
// a refusal writes nothing.
// Decided as a bucket (the nominal rate, a token back every 12 minutes),
// the next window would find no token.
func TestWindowAdmitsBurstPerWindow(t *testing.T) {
	srv := redistest.StartServer(t)
	s := windowStore(t, []string{srv.Addr()}, nil)
	ctx := context.Background()
	k := ratelimit.BucketKey{Tenant: "windows", Scope: "hourly"}
	base := redisClock(t, s).Truncate(time.Second)
	e1, e2 := base.Add(time.Hour), base.Add(2*time.Hour)
	take := func(l ratelimit.Limit, end time.Time, allowed bool, remaining float64) {
		t.Helper()
		var r ratelimit.Result
		var out Outcome
		var err error
		before, after := decideBetween(t, s, func() { r, out, err = s.Decide(ctx, k, l, 1) })
		if err != nil || out.Source != FromRedis || r.Allowed != allowed || r.Remaining != remaining || r.StateUnknown {
			t.Fatalf("take (end %v): %+v %+v %v; want allowed %v, %v left", end.Sub(base), r, out, err, allowed, remaining)
		}
		checkUntil(t, "ResetAfter", r.ResetAfter, end, before, after)
		if allowed && r.RetryAfter != 0 || !allowed && r.RetryAfter != r.ResetAfter {
			t.Errorf("RetryAfter %v, ResetAfter %v (allowed %v): want the reset when refused, zero when allowed", r.RetryAfter, r.ResetAfter, allowed)
		}
	}
	w1, w2 := windowOf(5, e1), windowOf(5, e2)
	for i := range 5 {
		take(w1, e1, true, float64(4-i))
	}
	writes := func() float64 {
		return commandStat(t, srv.Addr(), "set", "calls") + commandStat(t, srv.Addr(), "del", "calls")
	}
	before := writes()
	take(w1, e1, false, 0)
	take(w1, e1, false, 0)
	if got := writes() - before; got != 0 {
		t.Errorf("2 refusals: %v writes, want none", got)
	}
	take(w2, e2, true, 4)
	take(w1, e2, true, 3) // late: counted in the window that followed
	if n, err := s.client.Exists(ctx, bucketKey(k)).Result(); err != nil || n != 0 {
		t.Errorf("bucket key: EXISTS %v, %v; want none (a window writes its own key)", n, err)
	}
	ttl, err := s.client.PTTL(ctx, windowKey(k)).Result()
	if want := time.Until(e2) + time.Minute; err != nil || ttl < want-5*time.Second || ttl > want+5*time.Second {
		t.Errorf("window key's PTTL %v, %v; want about %v (until the window's end, and the minute for a clock behind Redis's)", ttl, err, want)
	}
}

// TestWindowMatchesReference runs a seeded stream of random TakeAlls over
// one tenant's buckets and windows through the scripts and, at the
// instants the scripts read from Redis's clock, through the embedded
// store: every result must be identical, refusals included. The windows
// advance now and then, some takes are late (for the window before), and
// one key switches between a bucket and a window, the window a new one at
// each switch.
func TestWindowMatchesReference(t *testing.T) {
	srv := redistest.StartServer(t)
	s := windowStore(t, []string{srv.Addr()}, nil)
	// Its wall clock is its own (0 at Unix 0), so that it counts windows
	// in Unix ns at Redis's instants.
	ref := ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{SweepInterval: time.Hour, Now: func() time.Time { return time.Unix(0, 0) }})
	rng := rand.New(rand.NewPCG(21, 22))
	base := redisClock(t, s).Truncate(time.Second).Add(time.Hour)
	key := func(scope string) ratelimit.BucketKey { return ratelimit.BucketKey{Tenant: "mixed", Scope: scope} }
	minute, daily, flipWindow := 1, 1, 0
	flipFixed := false
	var stats struct{ admitted, refused, windowRefused, windowStarts, late, flips int }
	for step := range 500 {
		if rng.IntN(10) == 0 {
			minute++
			stats.windowStarts++
		}
		if rng.IntN(40) == 0 {
			daily++
		}
		if rng.IntN(12) == 0 {
			flipFixed = !flipFixed
			if flipFixed {
				flipWindow++
			}
			stats.flips++
		}
		minuteEnd := minute
		if minute > 1 && rng.IntN(6) == 0 {
			minuteEnd-- // decided late: the window before
			stats.late++
		}
		flip := ratelimit.Limit{Rate: 0.2, Burst: 5}
		if flipFixed {
			flip = windowOf(5, base.Add(time.Duration(flipWindow)*time.Hour))
		}
		all := []ratelimit.Take{
			{Key: key(""), Limit: ratelimit.Limit{Rate: 2000, Burst: 10}},
			{Key: key("export"), Limit: ratelimit.Limit{Rate: 40, Burst: 3}},
			{Key: key("minute"), Limit: windowOf(8, base.Add(time.Duration(minuteEnd)*time.Minute))},
			{Key: key("daily"), Limit: windowOf(20.5, base.Add(time.Duration(daily)*24*time.Hour))},
			{Key: key("flip"), Limit: flip},
		}
		var takes []ratelimit.Take
		for _, i := range rng.Perm(len(all))[:1+rng.IntN(3)] {
			tk := all[i]
			tk.Cost = []float64{0.5, 1, 2.5}[rng.IntN(3)]
			takes = append(takes, tk)
		}
		if err := checkTakes(takes); err != nil {
			t.Fatal(err)
		}
		got := matchReference(t, s, ref, step, takes)
		for i := range takes {
			if takes[i].Limit.Fixed() && got[i].RetryAfter > 0 {
				stats.windowRefused++
			}
		}
		if got[0].Allowed {
			stats.admitted++
		} else {
			stats.refused++
		}
	}
	t.Logf("%+v", stats)
	if stats.admitted == 0 || stats.refused == 0 || stats.windowRefused == 0 || stats.windowStarts == 0 || stats.late == 0 || stats.flips < 2 {
		t.Errorf("the stream tests too little: %+v", stats)
	}
}

// TestWindowTakeAllAllOrNothing: a bucket beside a window in one TakeAll,
// one script call: a refusal by the window charges the bucket nothing,
// a refusal by the bucket charges the window nothing.
func TestWindowTakeAllAllOrNothing(t *testing.T) {
	srv := redistest.StartServer(t)
	s := windowStore(t, []string{srv.Addr()}, nil)
	base := redisClock(t, s).Truncate(time.Second)
	bucket := ratelimit.Take{Key: ratelimit.BucketKey{Tenant: "pair"}, Limit: ratelimit.Limit{Rate: 1e-3, Burst: 3}, Cost: 1}
	window := ratelimit.Take{Key: ratelimit.BucketKey{Tenant: "pair", Scope: "daily"}, Limit: windowOf(2, base.Add(time.Hour)), Cost: 1}
	calls := scriptCalls(t, srv)
	for range 2 {
		mustTakeAll(t, s, []ratelimit.Take{bucket, window}, true)
	}
	if got := scriptCalls(t, srv) - calls; got != 2 {
		t.Errorf("2 TakeAlls of a bucket and a window: %d script calls, want 2", got)
	}
	res := mustTakeAll(t, s, []ratelimit.Take{bucket, window}, false)
	if res[1].Allowed || res[1].Remaining != 0 || res[1].RetryAfter <= 0 || res[0].Allowed || res[0].RetryAfter != 0 || res[0].Remaining < 1 {
		t.Errorf("refused by the window: %+v; want the bucket with its token and no wait, the window empty until its end", res)
	}
	if r := mustTakeAll(t, s, []ratelimit.Take{bucket}, true); r[0].Remaining > 0.01 {
		t.Errorf("the bucket's last token: %+v left; want none (the refusal charged it nothing)", r[0])
	}
	// The bucket is empty now; the next window is full.
	next := window
	next.Limit = windowOf(2, base.Add(2*time.Hour))
	res = mustTakeAll(t, s, []ratelimit.Take{bucket, next}, false)
	if res[1].Remaining != 2 || res[1].RetryAfter != 0 || res[0].RetryAfter <= 0 {
		t.Errorf("refused by the bucket: %+v; want the window's 2 tokens and no wait", res)
	}
	next.Cost = 2
	if r := mustTakeAll(t, s, []ratelimit.Take{next}, true); r[0].Remaining != 0 {
		t.Errorf("the window's 2 tokens: %+v; want none left", r[0])
	}
}

// TestWindowKindSwitch: a key whose limit changes from a bucket to a
// window starts the window afresh, and back to a bucket the bucket
// starts full (the window's first admission deleted it), as the embedded
// store replaces its entry. The window's key is not the bucket's.
func TestWindowKindSwitch(t *testing.T) {
	srv := redistest.StartServer(t)
	s := windowStore(t, []string{srv.Addr()}, nil)
	ctx := context.Background()
	k := ratelimit.BucketKey{Tenant: "switch", Scope: "api"}
	bucket := ratelimit.Limit{Rate: 1e-3, Burst: 3}
	base := redisClock(t, s).Truncate(time.Second)
	take := func(l ratelimit.Limit, cost float64, allowed bool) ratelimit.Result {
		t.Helper()
		return mustTakeAll(t, s, []ratelimit.Take{{Key: k, Limit: l, Cost: cost}}, allowed)[0]
	}
	take(bucket, 3, true)
	take(bucket, 1, false)
	if r := take(windowOf(2, base.Add(time.Hour)), 1, true); r.Remaining != 1 {
		t.Errorf("the window after the bucket emptied: %+v, want 1 of 2 left (afresh)", r)
	}
	if n, _ := s.client.Exists(ctx, bucketKey(k)).Result(); n != 0 {
		t.Errorf("bucket key after the window's first admission: EXISTS %d, want 0", n)
	}
	if r := take(bucket, 1, true); r.Remaining < 1.99 || r.Remaining > 2.01 {
		t.Errorf("the bucket again: %+v, want 2 of 3 left (afresh)", r)
	}
	if r := take(windowOf(2, base.Add(2*time.Hour)), 2, true); r.Remaining != 0 {
		t.Errorf("the next window: %+v, want both its tokens", r)
	}
	if r := take(bucket, 1, true); r.Remaining < 1.99 || r.Remaining > 2.01 {
		t.Errorf("the bucket a third time: %+v, want 2 of 3 left (afresh)", r)
	}
	if bucketKey(k) == windowKey(k) || !strings.HasSuffix(windowKey(k), windowSuffix) {
		t.Errorf("keys %q, %q: want the window's apart", bucketKey(k), windowKey(k))
	}
}

// TestWindowRelimitSkipped: a reload's Relimit leaves windows alone (no
// script call for windows alone, no key written or moved), relimits the
// buckets beside them, and rejects a window's end before the epoch.
func TestWindowRelimitSkipped(t *testing.T) {
	srv := redistest.StartServer(t)
	s := windowStore(t, []string{srv.Addr()}, nil)
	ctx := context.Background()
	end := redisClock(t, s).Add(time.Hour)
	kw, kb := ratelimit.BucketKey{Tenant: "reload", Scope: "daily"}, ratelimit.BucketKey{Tenant: "reload"}
	w := windowOf(4, end)
	mustTakeAll(t, s, []ratelimit.Take{{Key: kw, Limit: w, Cost: 1}, {Key: kb, Limit: ratelimit.Limit{Rate: 1, Burst: 50}, Cost: 50}}, true)
	state := func() (string, time.Duration) {
		v, err := s.client.Get(ctx, windowKey(kw)).Result()
		ttl, err2 := s.client.PTTL(ctx, windowKey(kw)).Result()
		if err != nil || err2 != nil {
			t.Fatalf("window key: %v, %v", err, err2)
		}
		return v, ttl
	}
	v0, ttl0 := state()
	calls := scriptCalls(t, srv)
	if err := s.Relimit(ctx, map[ratelimit.BucketKey]ratelimit.Limit{kw: windowOf(1, end)}); err != nil {
		t.Fatal(err)
	}
	if got := scriptCalls(t, srv) - calls; got != 0 {
		t.Errorf("Relimit of a window: %d script calls, want none", got)
	}
	if err := s.Relimit(ctx, map[ratelimit.BucketKey]ratelimit.Limit{kw: windowOf(1, end), kb: {Rate: 0.5, Burst: 50}}); err != nil {
		t.Fatal(err)
	}
	if v, ttl := state(); v != v0 || ttl > ttl0 {
		t.Errorf("window key after Relimit: %q, PTTL %v; want %q, at most %v (untouched)", v, ttl, v0, ttl0)
	}
	if n, _ := s.client.Exists(ctx, bucketKey(kw)).Result(); n != 0 {
		t.Errorf("Relimit wrote a bucket key for a window")
	}
	if ms := pttl(t, s, kb); ms < 90000 {
		t.Errorf("the bucket beside: PTTL %d ms, want about 100 s (relimited from 50 s)", ms)
	}
	calls2, err := relimitCalls(map[ratelimit.BucketKey]ratelimit.Limit{kw: w, {Tenant: "other"}: w, {Tenant: "third"}: {Rate: 1, Burst: 1}})
	if err != nil || len(calls2) != 1 || len(calls2[0].keys) != 1 {
		t.Errorf("relimitCalls of two windows and a bucket: %+v, %v; want one call of one key", calls2, err)
	}
	if _, err := relimitCalls(map[ratelimit.BucketKey]ratelimit.Limit{kw: {Rate: 1, Burst: 1, End: -1}}); !errors.Is(err, ErrInvalidTake) {
		t.Errorf("relimitCalls of an end before the epoch: %v, want ErrInvalidTake", err)
	}
}

// TestWindowInvalid: a window's End must be after the epoch.
func TestWindowInvalid(t *testing.T) {
	srv := redistest.StartServer(t)
	s := windowStore(t, []string{srv.Addr()}, nil)
	ctx := context.Background()
	bad := ratelimit.Limit{Rate: 1, Burst: 1, End: -1}
	k := ratelimit.BucketKey{Tenant: "bad"}
	if _, err := s.Take(ctx, k, bad, 1); !errors.Is(err, ErrInvalidTake) {
		t.Errorf("Take with End -1: %v, want ErrInvalidTake", err)
	}
	if _, err := s.TakeAll(ctx, []ratelimit.Take{{Key: k, Limit: bigLimit, Cost: 1}, {Key: ratelimit.BucketKey{Tenant: "bad", Scope: "w"}, Limit: bad, Cost: 1}}); !errors.Is(err, ErrInvalidTake) {
		t.Errorf("TakeAll with End -1: %v, want ErrInvalidTake", err)
	}
}

// TestWindowSyncMode: in sync mode a window is decided on Redis, exactly:
// two instances admit its burst between them, not their shares plus the
// refill and the cost. Beside a synced bucket it stays all or nothing: the
// window's refusals leave the bucket uncharged (it reads exactly what the
// admissions took, once reconciled).
func TestWindowSyncMode(t *testing.T) {
	srv := redistest.StartServer(t)
	newSync := func(instances int) *Store {
		return windowStore(t, []string{srv.Addr()}, func(c *Config) {
			c.Mode, c.SyncInterval, c.Instances = Sync, 20*time.Millisecond, instances
		})
	}
	a, b := newSync(2), newSync(2)
	ctx := context.Background()
	base := redisClock(t, a).Truncate(time.Second)
	k := ratelimit.BucketKey{Tenant: "synced", Scope: "daily"}
	admitted := 0
	for i := range 16 {
		s := []*Store{a, b}[i%2]
		r, out, err := s.Decide(ctx, k, windowOf(10, base.Add(time.Hour)), 1)
		if err != nil || out.Source != FromRedis {
			t.Fatalf("take %d: %+v %v; want a decision on Redis", i, out, err)
		}
		if r.Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Errorf("two sync instances admitted %d of 16 from a window of 10, want 10", admitted)
	}

	c := newSync(1)
	bucket := ratelimit.Take{Key: ratelimit.BucketKey{Tenant: "synced"}, Limit: ratelimit.Limit{Rate: 1e-3, Burst: 100}, Cost: 1}
	window := ratelimit.Take{Key: k, Limit: windowOf(3, base.Add(2*time.Hour)), Cost: 1}
	admitted = 0
	for i := range 6 {
		res, out, err := c.DecideAll(ctx, []ratelimit.Take{bucket, window})
		if err != nil || out.Source != FromRedis || res[0].Allowed != res[1].Allowed {
			t.Fatalf("TakeAll %d: %+v %+v %v; want all or nothing, the window on Redis", i, res, out, err)
		}
		if res[0].Allowed {
			admitted++
		}
	}
	if admitted != 3 {
		t.Errorf("admitted %d of 6 beside a window of 3, want 3", admitted)
	}
	// The synced bucket reaches Redis within an interval or two.
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, err := c.client.Get(ctx, bucketKey(bucket.Key)).Result()
		var f [3]float64
		if err == nil && decodeDoubles(v, f[:]) == nil && f[0] > 96.99 && f[0] < 97.01 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("synced bucket in Redis: %v tokens (%v); want 97: 3 admissions charged, 3 refusals not", f[0], err)
		}
		time.Sleep(10 * time.Millisecond) // the reconciliation's interval, bounded
	}
}

// TestWindowDenialCache: a window's refusal is remembered until its end,
// for a take alone and for a TakeAll, and never refuses a take of the
// next window (another End), whichever take of a TakeAll the window is.
func TestWindowDenialCache(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.Timeout = time.Second }, Options{})
	ctx := context.Background()
	base := redisClock(t, s).Truncate(time.Second)
	k := ratelimit.BucketKey{Tenant: "denied", Scope: "daily"}
	w1, w2 := windowOf(2, base.Add(time.Hour)), windowOf(2, base.Add(2*time.Hour))
	for range 2 {
		if r, out, err := s.Decide(ctx, k, w1, 1); err != nil || !r.Allowed || out.Source != FromRedis {
			t.Fatalf("take within the window: %+v %+v %v", r, out, err)
		}
	}
	// The last admission left nothing: denied until the window's end,
	// not for the nominal rate's refill of a token (half an hour).
	r, out, err := s.Decide(ctx, k, w1, 1)
	if err != nil || r.Allowed || out.Source != FromDenyCache {
		t.Fatalf("take of the spent window: %+v %+v %v; want a remembered denial", r, out, err)
	}
	if want := time.Until(base.Add(time.Hour)); r.RetryAfter < want-2*time.Second || r.RetryAfter > want+2*time.Second {
		t.Errorf("remembered RetryAfter %v, want about %v (until the window's end)", r.RetryAfter, want)
	}
	if r, out, err := s.Decide(ctx, k, w2, 1); err != nil || !r.Allowed || out.Source != FromRedis {
		t.Errorf("take of the next window: %+v %+v %v; want admitted by Redis", r, out, err)
	}

	bucket := ratelimit.Take{Key: ratelimit.BucketKey{Tenant: "denied"}, Limit: bigLimit, Cost: 1}
	window := ratelimit.Take{Key: ratelimit.BucketKey{Tenant: "denied", Scope: "hourly"}, Limit: windowOf(1, base.Add(time.Hour)), Cost: 1}
	pair := func(end time.Duration) []ratelimit.Take {
		w := window
		w.Limit = windowOf(1, base.Add(end))
		return []ratelimit.Take{bucket, w}
	}
	for i, c := range []struct {
		end     time.Duration
		allowed bool
		src     Source
	}{{time.Hour, true, FromRedis}, {time.Hour, false, FromDenyCache}, {2 * time.Hour, true, FromRedis}, {2 * time.Hour, false, FromDenyCache}} {
		res, out, err := s.DecideAll(ctx, pair(c.end))
		if err != nil || res[0].Allowed != c.allowed || out.Source != c.src {
			t.Errorf("TakeAll %d (window ending at +%v): %+v %+v %v; want allowed %v from %v", i, c.end, res, out, err, c.allowed, c.src)
		}
	}
}

// TestWindowLocalPolicy: while Redis cannot answer, the local policy
// decides a window on this instance's share: its burst over the
// instances, per window, the next window full again.
func TestWindowLocalPolicy(t *testing.T) {
	srv := redistest.StartServer(t)
	addr := srv.Addr()
	srv.Kill()
	s := newTestStore(t, []string{addr}, func(c *Config) { c.Instances = 2 }, Options{})
	ctx := context.Background()
	base := time.Now().Truncate(time.Second)
	k := ratelimit.BucketKey{Tenant: "local", Scope: "daily"}
	for i, c := range []struct {
		end     time.Duration
		allowed bool
	}{{time.Hour, true}, {time.Hour, true}, {time.Hour, true}, {time.Hour, false}, {2 * time.Hour, true}, {2 * time.Hour, true}, {2 * time.Hour, true}, {2 * time.Hour, false}} {
		r, out, err := s.Decide(ctx, k, windowOf(6, base.Add(c.end)), 1)
		if err != nil || out.Source != FromPolicy || out.Policy != Local || r.Allowed != c.allowed {
			t.Fatalf("take %d (window ending at +%v): %+v %+v %v; want allowed %v by the local policy", i, c.end, r, out, err, c.allowed)
		}
	}
}

// TestWindowCluster: on a cluster a window's key shares its bucket's
// slot, and a TakeAll of a bucket and a window, one script call, admits
// the window's burst per window, for tenants on every master.
func TestWindowCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	s := windowStore(t, cl.Addrs(), nil)
	ctx := context.Background()
	masters := map[string]bool{}
	base := redisClock(t, s).Truncate(time.Second)
	for i := 0; len(masters) < 3; i++ {
		if i == 200 {
			t.Fatalf("tenants on %d masters after 200, want 3", len(masters))
		}
		tenant := fmt.Sprint("cluster-window-", i)
		bucket := ratelimit.Take{Key: ratelimit.BucketKey{Tenant: tenant}, Limit: bigLimit, Cost: 1}
		window := ratelimit.Take{Key: ratelimit.BucketKey{Tenant: tenant, Scope: "daily"}, Limit: windowOf(3, base.Add(time.Hour)), Cost: 1}
		node, err := s.cluster.MasterForKey(ctx, windowKey(window.Key))
		if err != nil {
			t.Fatal(err)
		}
		if masters[node.Options().Addr] {
			continue
		}
		masters[node.Options().Addr] = true
		ws, err1 := s.cluster.ClusterKeySlot(ctx, windowKey(window.Key)).Result()
		bs, err2 := s.cluster.ClusterKeySlot(ctx, bucketKey(bucket.Key)).Result()
		if err1 != nil || err2 != nil || ws != bs {
			t.Fatalf("slots of %s's window and bucket: %d, %d (%v, %v); want one", tenant, ws, bs, err1, err2)
		}
		for j := range 5 {
			mustTakeAll(t, s, []ratelimit.Take{bucket, window}, j < 3)
		}
		window.Limit = windowOf(3, base.Add(2*time.Hour))
		mustTakeAll(t, s, []ratelimit.Take{bucket, window}, true)
	}
}

func TestWindowUnits(t *testing.T) {
	for _, c := range []struct{ ns, us int64 }{{1, 1}, {999, 1}, {1000, 1}, {1001, 2}, {1_700_000_000_000_000_000, 1_700_000_000_000_000}} {
		if got := endMicros(c.ns); got != c.us {
			t.Errorf("endMicros(%d) = %d, want %d", c.ns, got, c.us)
		}
	}
	for _, tn := range hostileTenants {
		for _, sc := range []string{"", "x", "x:w", ":w", "#", strings.Repeat("s", 64)} {
			k := ratelimit.BucketKey{Tenant: tn, Scope: sc}
			wk := windowKey(k)
			if hashTag(wk) != hashTag(bucketKey(k)) {
				t.Errorf("window key %.60q: tag %q, want its bucket's", wk, hashTag(wk))
			}
			if other := bucketKey(ratelimit.BucketKey{Tenant: tn, Scope: sc + windowSuffix}); other == wk {
				t.Errorf("window key of %.40q is the bucket key of scope %q", k, sc+windowSuffix)
			}
		}
	}
	l := windowOf(12, time.Unix(100, 0))
	if got := localShare(l, 1, 3); got != (ratelimit.Limit{Rate: l.Rate / 3, Burst: 4, End: l.End}) {
		t.Errorf("share of %+v over 3 = %+v, want a third of the burst per window, the end kept", l, got)
	}
	window := []ratelimit.Take{{Limit: l, Cost: 1}}
	res := make([]ratelimit.Result, 1)
	for _, v := range []any{dbl(1), dbl(1) + dbl(math.NaN())} {
		if _, err := decodeTake([]any{int64(1), v, int64(7)}, window, res); !errors.Is(err, errBadReply) {
			t.Errorf("decodeTake(window %q) = %v, want errBadReply", v, err)
		}
	}
	if _, err := decodeTake([]any{int64(0), dbl(0.5) + dbl(107), int64(7)}, window, res); err != nil ||
		res[0] != (ratelimit.Result{Remaining: 0.5, RetryAfter: 100 * time.Microsecond, ResetAfter: 100 * time.Microsecond}) {
		t.Errorf("decodeTake(refused window) = %+v, %v", res[0], err)
	}
}

// TestWindowGatewayBehindRedis: a gateway whose clock is two seconds
// behind Redis's cuts a window that Redis's clock says has ended; its
// takes still count in it (the key outlives the window's end by a
// minute), so a window of one admits one.
func TestWindowGatewayBehindRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	s := windowStore(t, []string{srv.Addr()}, nil)
	k := ratelimit.BucketKey{Tenant: "skew", Scope: "minute"}
	l := windowOf(1, redisClock(t, s).Add(-time.Second)) // ended a second ago on Redis's clock
	admitted := 0
	for range 20 {
		if r, err := s.Take(context.Background(), k, l, 1); err == nil && r.Allowed {
			admitted++
		}
	}
	if admitted != 1 {
		t.Errorf("a window of 1 admitted %d of 20 takes from a gateway behind Redis", admitted)
	}
}
