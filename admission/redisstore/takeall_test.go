package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/redistest"
)

// TestTakeAllMatchesReference runs random TakeAlls over one tenant's four
// buckets through the script and, at the instants the script read from
// Redis's clock, through the embedded store's TakeAllAt: every result must
// be identical, refusals included (no bucket charged).
func TestTakeAllMatchesReference(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.Batch.Disabled = true; c.Timeout = time.Second }, Options{})
	ref := ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{SweepInterval: time.Hour})
	rng := rand.New(rand.NewPCG(13, 14))
	scopes := []string{"", "export", "burst", "daily"}
	limits := []ratelimit.Limit{{Rate: 2000, Burst: 10}, {Rate: 40, Burst: 3}, {Rate: 333.3, Burst: 7.5}, {Rate: 0.5, Burst: 6}}
	refused := 0
	for step := range 300 {
		var takes []ratelimit.Take
		for _, i := range rng.Perm(len(scopes))[:1+rng.IntN(3)] {
			takes = append(takes, ratelimit.Take{Key: ratelimit.BucketKey{Tenant: "multi", Scope: scopes[i]},
				Limit: limits[i], Cost: []float64{0.5, 1, 2.5}[rng.IntN(3)]})
		}
		if got := matchReference(t, s, ref, step, takes); !got[0].Allowed {
			refused++
		}
	}
	if refused == 0 {
		t.Error("no TakeAll was refused; the sequence tests nothing")
	}
}

// matchReference decides takes, step step of a sequence, through the
// script and, at the instant the script read from Redis's clock, through
// ref's TakeAllAt, and fails t unless every result is identical. It
// returns the script's.
func matchReference(t *testing.T, s *Store, ref *ratelimit.MemoryStore, step int, takes []ratelimit.Take) []ratelimit.Result {
	t.Helper()
	got := make([]ratelimit.Result, len(takes))
	nowUS, err := s.evalTakes(context.Background(), takes, got)
	if err != nil {
		t.Fatalf("step %d: %v", step, err)
	}
	want := make([]ratelimit.Result, len(takes))
	if err := ref.TakeAllAt(nowUS*1000, takes, want); err != nil {
		t.Fatal(err)
	}
	for i := range takes {
		if got[i] != want[i] {
			t.Fatalf("step %d take %d (%+v) of %d at %dµs:\n got %+v\nwant %+v", step, i, takes[i], len(takes), nowUS, got[i], want[i])
		}
	}
	return got
}

// TestTakeAllOneCall: a grouped request is one script call whatever the
// number of buckets; a refusal charges none and is then answered from the
// denial cache; invalid TakeAlls are errors.
func TestTakeAllOneCall(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.Timeout = time.Second }, Options{})
	ctx := context.Background()
	group := ratelimit.Take{Key: ratelimit.BucketKey{Tenant: "acme", Scope: "export"}, Limit: ratelimit.Limit{Rate: 1, Burst: 2}, Cost: 1}
	// The tenant's bucket refills slowly (1 a second), so that a stall
	// of the machine between the calls cannot refill what the final check
	// counts (at 100 a second, 13 ms under a loaded race run did).
	tenant := ratelimit.Take{Key: ratelimit.BucketKey{Tenant: "acme"}, Limit: ratelimit.Limit{Rate: 1, Burst: 100}, Cost: 1}
	daily := ratelimit.Take{Key: ratelimit.BucketKey{Tenant: "acme", Scope: "daily"}, Limit: ratelimit.Limit{Rate: 1e-3, Burst: 1000}, Cost: 1}
	takes := []ratelimit.Take{group, tenant, daily}
	before := scriptCalls(t, srv)
	for i := range 2 {
		res, out, err := s.DecideAll(ctx, takes)
		if err != nil || out.Source != FromRedis || !res[0].Allowed || !res[1].Allowed || !res[2].Allowed {
			t.Fatalf("TakeAll %d: %+v %+v %v", i, res, out, err)
		}
	}
	if calls := scriptCalls(t, srv) - before; calls != 2 {
		t.Errorf("2 TakeAlls of 3 buckets: %d script calls, want 2", calls)
	}
	// The group's burst is spent: the second admission left it short, so
	// the refusal comes from the denial cache; without the cache, from
	// the script, which charges nothing.
	res, out, err := s.DecideAll(ctx, takes)
	if err != nil || out.Source != FromDenyCache || res[0].Allowed || res[0].RetryAfter <= 0 || res[1].RetryAfter != 0 {
		t.Fatalf("3rd TakeAll: %+v %+v %v, want a cached refusal", res, out, err)
	}
	uncached := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.Timeout = time.Second; c.DenyCacheSize = -1 }, Options{})
	res, out, err = uncached.DecideAll(ctx, takes)
	if err != nil || out.Source != FromRedis || res[0].Allowed || res[0].RetryAfter <= 0 || res[1].RetryAfter != 0 || res[2].RetryAfter != 0 {
		t.Fatalf("refused TakeAll from Redis: %+v %+v %v", res, out, err)
	}
	if r, _ := s.Take(ctx, tenant.Key, tenant.Limit, 1); r.Remaining > 97.5 {
		t.Errorf("tenant bucket after 2 admissions, 2 refusals and this take: %v left, want ~97 (refusals charge nothing)", r.Remaining)
	}
	for _, bad := range [][]ratelimit.Take{
		nil,
		{group, {Key: ratelimit.BucketKey{Tenant: "initech"}, Limit: tenant.Limit, Cost: 1}},
		{group, {Key: group.Key, Limit: tenant.Limit, Cost: 1}},
	} {
		if _, err := s.TakeAll(ctx, bad); !errors.Is(err, ErrInvalidTake) && !errors.Is(err, ratelimit.ErrDuplicateBucket) {
			t.Errorf("TakeAll(%+v) = %v, want an invalid take", bad, err)
		}
	}
}

// TestRefusalWritesNothing: a refused take changes no key (INFO
// commandstats counts no SET), so a flood of refusals costs Redis no
// write, no replication and no AOF traffic; an admission writes its
// buckets. The refusals go to Redis (no denial cache).
func TestRefusalWritesNothing(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.Timeout = time.Second; c.DenyCacheSize = -1 }, Options{})
	ctx := context.Background()
	l := ratelimit.Limit{Rate: 0.01, Burst: 3}
	k := ratelimit.BucketKey{Tenant: "flood"}
	sets := func() float64 { return commandStat(t, srv.Addr(), "set", "calls") }
	before := sets()
	for range 3 {
		if r, err := s.Take(ctx, k, l, 1); err != nil || !r.Allowed {
			t.Fatalf("take within the burst: %+v %v", r, err)
		}
	}
	if got := sets() - before; got != 3 {
		t.Fatalf("3 admissions: %v SETs, want 3", got)
	}
	pttl := func() int {
		v, err := srv.Do("PTTL", bucketKey(k))
		n, _ := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("PTTL = %q, %v; want a TTL", v, err)
		}
		return n
	}
	ttl := pttl()
	before = sets()
	for range 100 {
		if r, err := s.Take(ctx, k, l, 1); err != nil || r.Allowed {
			t.Fatalf("take over the burst: %+v %v", r, err)
		}
	}
	if _, err := s.TakeAll(ctx, []ratelimit.Take{{Key: k, Limit: l, Cost: 1}, {Key: ratelimit.BucketKey{Tenant: "flood", Scope: "x"}, Limit: l, Cost: 1}}); err != nil {
		t.Fatal(err)
	}
	if got := sets() - before; got != 0 {
		t.Errorf("101 refusals: %v SETs, want none", got)
	}
	if ttl2 := pttl(); ttl2 > ttl {
		t.Errorf("PTTL %d after refusals (was %d): the key's expiry moved", ttl2, ttl)
	}
	t.Logf("Redis time per script call: %.2f µs", commandStat(t, srv.Addr(), "evalsha", "usec_per_call"))
}
