package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/redistest"
)

// stateAt returns the doubles stored at key (a bucket's tokens, last
// and expiry; a window's used and end), nil when the key is missing.
func stateAt(t *testing.T, s *Store, key string, n int) []float64 {
	t.Helper()
	v, err := s.client.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	f := make([]float64, n)
	if err == nil {
		err = decodeDoubles(v, f)
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return f
}

// mustSettle settles takes as id on s and fails t unless it was applied
// as want says. It returns the Redis clock the script read (µs).
func mustSettle(t *testing.T, s *Store, id string, takes []ratelimit.Take, want bool) int64 {
	t.Helper()
	applied, now, err := s.settle(context.Background(), id, takes)
	if err != nil || applied != want {
		t.Fatalf("settle %q: applied %v, %v; want applied %v", id, applied, err, want)
	}
	return now
}

// takeBoth decides takes through the script and, at the instant the
// script read from Redis's clock, through ref, and fails t unless the
// results (got, the script's; want, ref's) agree within a float's
// rounding. The embedded store's denial reports a debt as a negative
// Remaining, the scripts' decoding as none: the two agree on the tokens
// when want's is read as the Result's contract says, never below zero.
func takeBoth(t *testing.T, s *Store, ref *ratelimit.MemoryStore, what string, takes []ratelimit.Take) (got, want []ratelimit.Result) {
	t.Helper()
	got, want = make([]ratelimit.Result, len(takes)), make([]ratelimit.Result, len(takes))
	nowUS, err := s.evalTakes(context.Background(), takes, got)
	if err != nil {
		t.Fatal(err)
	}
	if err := ref.TakeAllAt(nowUS*1000, takes, want); err != nil {
		t.Fatal(err)
	}
	near := func(a, b time.Duration) bool { return a-b <= time.Microsecond && b-a <= time.Microsecond }
	for i := range got {
		g, w := got[i], want[i]
		if g.Allowed != w.Allowed || math.Abs(g.Remaining-max(0, w.Remaining)) > 1e-9 || !near(g.RetryAfter, w.RetryAfter) || !near(g.ResetAfter, w.ResetAfter) {
			t.Fatalf("%s, take %d:\n got %+v\nwant %+v", what, i, g, w)
		}
	}
	return got, want
}

// TestSettleMatchesMemoryStore runs a seeded stream of reservations (a
// TakeAll of one tenant's buckets and window) and settlements (what each
// admitted request used less what it reserved, some retried) through the
// scripts and, at the instants they read from Redis's clock, through the
// embedded store. Every reservation's results agree, and so, after
// every step, do the tokens of each bucket and window, read by a take
// that both must refuse (it asks for more than the burst): its
// RetryAfter is the time until the bucket holds that much, debt included.
// A retried settlement changes nothing.
func TestSettleMatchesMemoryStore(t *testing.T) {
	srv := redistest.StartServer(t)
	s := windowStore(t, []string{srv.Addr()}, nil)
	ref := ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{SweepInterval: time.Hour, Now: func() time.Time { return time.Unix(0, 0) }})
	rng := rand.New(rand.NewPCG(31, 32))
	base := redisClock(t, s).Truncate(time.Second).Add(time.Hour)
	key := func(scope string) ratelimit.BucketKey { return ratelimit.BucketKey{Tenant: "settle", Scope: scope} }
	all := []ratelimit.Take{
		// Rates that refill a few tokens over the milliseconds of a
		// dozen steps on Redis's clock, so debts are repaid in the run.
		{Key: key(""), Limit: ratelimit.Limit{Rate: 3000, Burst: 20}},
		{Key: key("export"), Limit: ratelimit.Limit{Rate: 1000, Burst: 8}},
		{Key: key("daily"), Limit: windowOf(15, base)},
	}
	type request struct {
		id      string
		takes   []ratelimit.Take
		reserve float64
	}
	var open, settled []request
	var stats struct{ admitted, refused, settled, retried, inDebt int }
	for step := range 600 {
		if rng.IntN(25) == 0 {
			all[2].Limit = windowOf(15, base.Add(time.Duration(step)*time.Minute))
		}
		switch op := rng.IntN(10); {
		case op < 5 || len(open) == 0:
			reserve := []float64{0.5, 1, 2.5, 4}[rng.IntN(4)]
			var takes []ratelimit.Take
			for _, i := range rng.Perm(len(all))[:1+rng.IntN(len(all))] {
				tk := all[i]
				tk.Cost = reserve
				takes = append(takes, tk)
			}
			if got, _ := takeBoth(t, s, ref, fmt.Sprintf("step %d: reservation %+v", step, takes), takes); !got[0].Allowed {
				stats.refused++
				break
			}
			stats.admitted++
			open = append(open, request{id: fmt.Sprint("req-", step), takes: takes, reserve: reserve})
		case op < 9:
			n := rng.IntN(len(open))
			r := open[n]
			open = append(open[:n], open[n+1:]...)
			used := []float64{0, r.reserve / 2, r.reserve, 2 * r.reserve, 12}[rng.IntN(5)]
			for i := range r.takes {
				r.takes[i].Cost = used - r.reserve
			}
			if nowUS := mustSettle(t, s, r.id, r.takes, used != r.reserve); nowUS != 0 {
				if err := ref.SettleAt(nowUS*1000, r.id, r.takes); err != nil {
					t.Fatal(err)
				}
			}
			settled = append(settled, r)
			stats.settled++
		case len(settled) > 0:
			r := settled[rng.IntN(len(settled))]
			mustSettle(t, s, r.id, r.takes, false)
			stats.retried++
		}
		probe := make([]ratelimit.Take, len(all))
		for i, tk := range all {
			probe[i] = tk
			probe[i].Cost = 2 * tk.Limit.Burst
		}
		got, want := takeBoth(t, s, ref, fmt.Sprintf("step %d: tokens", step), probe)
		if got[0].Allowed {
			t.Fatalf("step %d: a take of twice the burst admitted", step)
		}
		// In debt: the probe of twice the burst waits longer than an
		// empty bucket's refill of it (Remaining shows no debt).
		for i := range 2 {
			if l := all[i].Limit; want[i].RetryAfter > time.Duration(2*l.Burst/l.Rate*1e9)+time.Microsecond {
				stats.inDebt++
				break
			}
		}
	}
	t.Logf("%+v", stats)
	if stats.admitted < 50 || stats.refused < 50 || stats.settled < 50 || stats.retried < 20 || stats.inDebt < 50 {
		t.Errorf("the stream tests too little: %+v", stats)
	}
}

// TestSettleExactlyOnce: a settlement is applied once per id, however
// often it is retried; another id applies again; the dedupe key lives in
// the tenant's keys and expires within SettleDedupeTTL.
func TestSettleExactlyOnce(t *testing.T) {
	srv := redistest.StartServer(t)
	s := windowStore(t, []string{srv.Addr()}, nil)
	ctx := context.Background()
	k := ratelimit.BucketKey{Tenant: "once", Scope: "export"}
	l := ratelimit.Limit{Rate: 1e-6, Burst: 100}
	charge := []ratelimit.Take{{Key: k, Limit: l, Cost: 7}}
	tokens := func() float64 {
		t.Helper()
		f := stateAt(t, s, bucketKey(k), 3)
		if f == nil {
			t.Fatal("no bucket")
		}
		return f[0]
	}
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-3 }
	mustSettle(t, s, "req-1", charge, true)
	if got := tokens(); !near(got, 93) {
		t.Fatalf("tokens after a charge of 7: %v, want 93", got)
	}
	for range 3 {
		if err := s.Settle(ctx, "req-1", charge); err != nil {
			t.Fatal(err)
		}
	}
	mustSettle(t, s, "req-1", charge, false)
	if got := tokens(); !near(got, 93) {
		t.Errorf("tokens after retries of req-1: %v, want 93 (applied once)", got)
	}
	mustSettle(t, s, "req-2", charge, true)
	if got := tokens(); !near(got, 86) {
		t.Errorf("tokens after req-2: %v, want 86", got)
	}
	// An id is a tenant's: the same id of another tenant is another
	// settlement.
	other := []ratelimit.Take{{Key: ratelimit.BucketKey{Tenant: "twice"}, Limit: l, Cost: -1}}
	mustSettle(t, s, "req-1", other, true)
	// A refund of a bucket never seen (full) leaves it full: no write.
	if f := stateAt(t, s, bucketKey(other[0].Key), 3); f != nil {
		t.Errorf("a refund of a full bucket wrote %v", f)
	}
	ttl, err := s.client.PTTL(ctx, settleKey(k.Tenant, "req-1")).Result()
	if err != nil || ttl <= 0 || ttl > SettleDedupeTTL {
		t.Errorf("dedupe key's PTTL %v, %v; want within (0, %v]", ttl, err, SettleDedupeTTL)
	}
}

// TestSettleWindow: on Redis a settlement counts in its window while it
// runs, within 0 and 2 × Burst, and keeps the key's expiry at the
// window's end; a window never seen, another window's state, or one whose
// end has passed (its key not yet expired) is left as it is.
func TestSettleWindow(t *testing.T) {
	srv := redistest.StartServer(t)
	s := windowStore(t, []string{srv.Addr()}, nil)
	ctx := context.Background()
	k := ratelimit.BucketKey{Tenant: "windows", Scope: "daily"}
	base := redisClock(t, s).Truncate(time.Second)
	end := base.Add(time.Hour)
	l := windowOf(10, end)
	settle := func(id string, l ratelimit.Limit, cost float64) {
		t.Helper()
		mustSettle(t, s, id, []ratelimit.Take{{Key: k, Limit: l, Cost: cost}}, true)
	}
	used := func() float64 {
		t.Helper()
		f := stateAt(t, s, windowKey(k), 2)
		if f == nil {
			t.Fatal("no window state")
		}
		if f[1] != float64(endMicros(l.End)) {
			t.Fatalf("window's end %v, want %v", f[1], endMicros(l.End))
		}
		return f[0]
	}
	settle("never", l, 3)
	if f := stateAt(t, s, windowKey(k), 2); f != nil {
		t.Fatalf("a settlement of a window never seen wrote %v", f)
	}
	mustTakeAll(t, s, []ratelimit.Take{{Key: k, Limit: l, Cost: 2}}, true)
	for i, c := range []struct{ cost, want float64 }{{3, 5}, {-1, 4}, {-10, 0}, {100, 20}, {1, 21}, {-2, 19}} {
		settle(fmt.Sprint("req-", i), l, c.cost)
		if got := used(); got != c.want {
			t.Errorf("settle %v: %v used, want %v", c.cost, got, c.want)
		}
	}
	ttl, err := s.client.PTTL(ctx, windowKey(k)).Result()
	if want := time.Until(end); err != nil || ttl < want-5*time.Second || ttl > want+5*time.Second {
		t.Errorf("window key's PTTL %v, %v; want about %v (until the window's end)", ttl, err, want)
	}
	earlier := windowOf(10, base.Add(time.Minute))
	settle("earlier", earlier, -18)
	if got := used(); got != 19 {
		t.Errorf("settle of an earlier window: %v used, want 19 (untouched)", got)
	}

	// A window whose end has passed on Redis's clock while its key
	// lingers.
	past := windowOf(10, redisClock(t, s).Add(-time.Second))
	over := ratelimit.BucketKey{Tenant: "windows", Scope: "over"}
	state := string(packDoubles(4, float64(endMicros(past.End))))
	if err := s.client.Set(ctx, windowKey(over), state, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	mustSettle(t, s, "over", []ratelimit.Take{{Key: over, Limit: past, Cost: -4}}, true)
	if f := stateAt(t, s, windowKey(over), 2); f == nil || f[0] != 4 {
		t.Errorf("settle of a window that is over: state %v, want 4 used (untouched)", f)
	}
}

// packDoubles is struct.pack '<d...' of fs, as the scripts store them.
func packDoubles(fs ...float64) []byte {
	var b []byte
	for _, f := range fs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
	}
	return b
}

// TestSettleSyncMode: a tenant's bucket decided in sync mode on two
// instances and its route group's decided exactly (ModeExact), reserved
// together and settled in one call (refunds mostly, while the bucket in
// Redis is about full), end charged exactly what the requests used once
// the instances' takes are reconciled.
func TestSettleSyncMode(t *testing.T) {
	srv := redistest.StartServer(t)
	newSync := func() *Store {
		return windowStore(t, []string{srv.Addr()}, func(c *Config) {
			c.Mode, c.SyncInterval, c.Instances = Sync, 20*time.Millisecond, 2
		})
	}
	stores := []*Store{newSync(), newSync()}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(41, 42))
	l := ratelimit.Limit{Rate: 1e-3, Burst: 1000}
	bucket := ratelimit.Take{Key: ratelimit.BucketKey{Tenant: "synced"}, Limit: l, Cost: 5}
	group := ratelimit.Take{Key: ratelimit.BucketKey{Tenant: "synced", Scope: "export"}, Limit: l, Cost: 5, Mode: ratelimit.ModeExact}
	sum := 0.0
	for i := range 40 {
		s := stores[i%2]
		takes := []ratelimit.Take{bucket, group}
		res, out, err := s.DecideAll(ctx, takes)
		if err != nil || out.Source != FromRedis || !res[0].Allowed || !res[1].Allowed {
			t.Fatalf("reservation %d: %+v %+v %v; want admitted, the group on Redis", i, res, out, err)
		}
		used := float64(rng.IntN(8))
		for j := range takes {
			takes[j].Cost = used - 5
		}
		if err := s.Settle(ctx, fmt.Sprint("req-", i), takes); err != nil {
			t.Fatal(err)
		}
		sum += used
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, k := range []ratelimit.BucketKey{bucket.Key, group.Key} {
		for {
			f := stateAt(t, stores[0], bucketKey(k), 3)
			if f != nil && math.Abs(f[0]-(l.Burst-sum)) < 0.01 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v in Redis: %v; want %v tokens, the burst less what was used", k, f, l.Burst-sum)
			}
			time.Sleep(10 * time.Millisecond) // the reconciliation's interval, bounded
		}
	}
}

// TestSettleCluster: on a cluster a settlement's dedupe key, buckets and
// window share the tenant's slot, for tenants on every master: one script
// call, no CROSSSLOT, applied once.
func TestSettleCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	s := windowStore(t, cl.Addrs(), nil)
	ctx := context.Background()
	base := redisClock(t, s).Truncate(time.Second)
	masters := map[string]bool{}
	for i := 0; len(masters) < 3; i++ {
		if i == 200 {
			t.Fatalf("tenants on %d masters after 200, want 3", len(masters))
		}
		tenant := fmt.Sprint("cluster-settle-", i)
		takes := []ratelimit.Take{
			{Key: ratelimit.BucketKey{Tenant: tenant}, Limit: bigLimit, Cost: 1},
			{Key: ratelimit.BucketKey{Tenant: tenant, Scope: "export"}, Limit: ratelimit.Limit{Rate: 1e-6, Burst: 10}, Cost: 1},
			{Key: ratelimit.BucketKey{Tenant: tenant, Scope: "daily"}, Limit: windowOf(3, base.Add(time.Hour)), Cost: 1},
		}
		dedupe := settleKey(tenant, "req")
		node, err := s.cluster.MasterForKey(ctx, dedupe)
		if err != nil {
			t.Fatal(err)
		}
		if masters[node.Options().Addr] {
			continue
		}
		masters[node.Options().Addr] = true
		ds, err1 := s.cluster.ClusterKeySlot(ctx, dedupe).Result()
		bs, err2 := s.cluster.ClusterKeySlot(ctx, bucketKey(takes[0].Key)).Result()
		if err1 != nil || err2 != nil || ds != bs {
			t.Fatalf("slots of %s's dedupe key and bucket: %d, %d (%v, %v); want one", tenant, ds, bs, err1, err2)
		}
		mustTakeAll(t, s, takes, true)
		for j := range takes {
			takes[j].Cost = 2
		}
		mustSettle(t, s, "req", takes, true)
		mustSettle(t, s, "req", takes, false)
		if f := stateAt(t, s, bucketKey(takes[1].Key), 3); f == nil || math.Abs(f[0]-7) > 1e-3 {
			t.Errorf("%s's group bucket: %v, want 7 tokens (reserved 1, charged 2 once)", tenant, f)
		}
		if f := stateAt(t, s, windowKey(takes[2].Key), 2); f == nil || f[0] != 3 {
			t.Errorf("%s's window: %v, want 3 used", tenant, f)
		}
	}
}

// TestSettleInvalid: a settlement of a bucket twice, a cost that is not
// finite, several tenants or no id is refused before Redis is asked;
// costs all zero ask nothing either; a closed store or a Redis that is
// away is an error.
func TestSettleInvalid(t *testing.T) {
	srv := redistest.StartServer(t)
	s := windowStore(t, []string{srv.Addr()}, nil)
	ctx := context.Background()
	a, b := ratelimit.BucketKey{Tenant: "a"}, ratelimit.BucketKey{Tenant: "b"}
	l := ratelimit.Limit{Rate: 1, Burst: 10}
	before := scriptCalls(t, srv)
	for _, c := range []struct {
		name  string
		id    string
		takes []ratelimit.Take
		want  error
	}{
		{"duplicate", "r", []ratelimit.Take{{Key: a, Limit: l, Cost: 1}, {Key: a, Limit: l, Cost: 2}}, ratelimit.ErrDuplicateBucket},
		{"NaN", "r", []ratelimit.Take{{Key: a, Limit: l, Cost: math.NaN()}}, ErrInvalidTake},
		{"+Inf", "r", []ratelimit.Take{{Key: a, Limit: l, Cost: math.Inf(1)}}, ErrInvalidTake},
		{"burst", "r", []ratelimit.Take{{Key: a, Limit: ratelimit.Limit{Rate: 1}, Cost: 1}}, ErrInvalidTake},
		{"tenants", "r", []ratelimit.Take{{Key: a, Limit: l, Cost: 1}, {Key: b, Limit: l, Cost: 1}}, ErrInvalidTake},
		{"no id", "", []ratelimit.Take{{Key: a, Limit: l, Cost: 1}}, ErrInvalidTake},
		{"none", "r", nil, nil},
		{"zero", "r", []ratelimit.Take{{Key: a, Limit: l}, {Key: ratelimit.BucketKey{Tenant: "a", Scope: "x"}, Limit: l}}, nil},
	} {
		err := s.Settle(ctx, c.id, c.takes)
		if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if errors.Is(c.want, ErrInvalidTake) && !errors.Is(err, ratelimit.ErrInvalidTake) {
			t.Errorf("%s: %v does not match ratelimit.ErrInvalidTake", c.name, err)
		}
	}
	if calls := scriptCalls(t, srv) - before; calls != 0 {
		t.Errorf("%d script calls for settlements invalid or of nothing, want 0", calls)
	}
	if n, err := s.client.Exists(ctx, bucketKey(a), bucketKey(b), settleKey("a", "r")).Result(); err != nil || n != 0 {
		t.Errorf("EXISTS of the buckets and the dedupe key: %v, %v; want none", n, err)
	}

	charge := []ratelimit.Take{{Key: a, Limit: l, Cost: 1}}
	srv.Kill()
	if err := s.Settle(ctx, "away", charge); err == nil || errors.Is(err, ErrInvalidTake) {
		t.Errorf("settle with Redis away: %v, want Redis's error", err)
	}
	_ = s.Close()
	if err := s.Settle(ctx, "closed", charge); !errors.Is(err, ErrClosed) {
		t.Errorf("settle after Close: %v, want ErrClosed", err)
	}
}

// TestSettleSyncAfterError: a settlement of a synced bucket beside an
// exact one settles the synced bucket's view only once the exact
// buckets' call succeeded: after a failed call the view is as it was,
// and the retry settles it once.
func TestSettleSyncAfterError(t *testing.T) {
	srv := redistest.StartServer(t)
	// No reconciliation during the test: the view's takes stay unpushed.
	s := windowStore(t, []string{srv.Addr()}, func(c *Config) { c.Mode, c.SyncInterval = Sync, time.Hour })
	l := ratelimit.Limit{Rate: 1e-3, Burst: 100}
	takes := []ratelimit.Take{
		{Key: ratelimit.BucketKey{Tenant: "mixed"}, Limit: l, Cost: 5},
		{Key: ratelimit.BucketKey{Tenant: "mixed", Scope: "export"}, Limit: l, Cost: 5, Mode: ratelimit.ModeExact},
	}
	mustTakeAll(t, s, takes, true)
	taken := func() float64 {
		t.Helper()
		y := s.syncer
		sh := &y.shards[y.shard(takes[0].Key)]
		sh.mu.Lock()
		defer sh.mu.Unlock()
		return sh.m[takes[0].Key].taken
	}
	if got := taken(); got != 5 {
		t.Fatalf("view's takes after the reservation: %v, want 5", got)
	}
	for i := range takes {
		takes[i].Cost = -3
	}
	srv.Kill()
	if err := s.Settle(context.Background(), "req", takes); err == nil {
		t.Fatal("settle with Redis away: no error")
	}
	if got := taken(); got != 5 {
		t.Errorf("view's takes after a failed settlement: %v, want 5 (untouched)", got)
	}
	srv.Restart()
	// Retried until the breaker lets the call through again.
	deadline := time.Now().Add(10 * time.Second)
	for {
		applied, _, err := s.settle(context.Background(), "req", takes)
		if err == nil && applied {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("retry after Redis came back: applied %v, %v", applied, err)
		}
		time.Sleep(20 * time.Millisecond) // the breaker's probe, bounded
	}
	if got := taken(); got != 2 {
		t.Errorf("view's takes after the retry: %v, want 2", got)
	}
	// Redis restarted empty: the exact bucket was full, and a refund of
	// 3 leaves it so.
	if f := stateAt(t, s, bucketKey(takes[1].Key), 3); f != nil {
		t.Errorf("exact bucket after the restart: %v, want none (full)", f)
	}
}
