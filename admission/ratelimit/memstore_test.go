package ratelimit

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func TestMemoryStoreRefillAndForget(t *testing.T) {
	var now atomic.Int64
	now.Store(int64(time.Hour))
	// No automatic sweep: it could drop acme's full bucket before Len is
	// checked, when both tenants share a shard.
	s := NewMemoryStore(MemoryStoreOptions{Shards: 4, SweepInterval: time.Hour, Now: func() time.Time { return time.Unix(0, now.Load()) }})
	l := Limit{Rate: 5, Burst: 25}
	k := BucketKey{Tenant: "initech"}
	for i := range 25 {
		if r, _ := s.Take(context.Background(), k, l, 1); !r.Allowed {
			t.Fatalf("take %d denied", i)
		}
	}
	r, _ := s.Take(context.Background(), k, l, 1)
	if r.Allowed || r.RetryAfter != 200*time.Millisecond {
		t.Fatalf("over burst: allowed=%v retry=%v, want false 200ms", r.Allowed, r.RetryAfter)
	}
	other, _ := s.Take(context.Background(), BucketKey{Tenant: "acme"}, l, 1)
	if !other.Allowed {
		t.Fatal("another tenant was denied")
	}
	now.Add(int64(time.Second))
	if r, _ := s.Take(context.Background(), k, l, 5); !r.Allowed {
		t.Fatal("not refilled after one second")
	}
	if got := s.Len(); got != 2 {
		t.Fatalf("Len = %d, want 2", got)
	}
	now.Add(int64(10 * time.Second))
	s.Sweep(s.Clock())
	if got := s.Len(); got != 0 {
		t.Fatalf("after refill and sweep Len = %d, want 0", got)
	}
}

// BenchmarkMemoryStoreTakeOneGoroutine100kTenants is one decision after
// another, on one goroutine, over 100,000 tenants' buckets: the keys are
// taken in the order they were made, so the caller's key is in cache (as a
// request's tenant, just identified, is) while the store's buckets, placed
// by hash, are not.
func BenchmarkMemoryStoreTakeOneGoroutine100kTenants(b *testing.B) {
	s, keys, l := memStore100k()
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if i++; i == len(keys) {
			i = 0
		}
		s.Take(context.Background(), keys[i], l, 1)
	}
}

// memStore100k returns a MemoryStore holding 100,000 tenants' buckets, their
// keys and their limit.
func memStore100k() (*MemoryStore, []BucketKey, Limit) {
	s := NewMemoryStore(MemoryStoreOptions{})
	keys := make([]BucketKey, 100_000)
	for i := range keys {
		keys[i] = BucketKey{Tenant: "tenant-" + strconv.Itoa(i)}
	}
	l := Limit{Rate: 1, Burst: 1e9} // never full again during a run: no bucket is forgotten
	for _, k := range keys {
		s.Take(context.Background(), k, l, 1)
	}
	return s, keys, l
}

func BenchmarkMemoryStoreTake100kTenants(b *testing.B) {
	s, keys, l := memStore100k()
	n := uint64(len(keys))
	b.ReportAllocs()
	b.ResetTimer()
	var seq atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		i := seq.Add(7919) // each goroutine starts elsewhere
		for pb.Next() {
			i += 7919
			s.Take(context.Background(), keys[i%n], l, 1)
		}
	})
}

// TestMemShardCollisions: two keys with the same hash are kept apart, and
// sweeping either one leaves the other intact.
func TestMemShardCollisions(t *testing.T) {
	sh := memShard{buckets: map[uint64]*memEntry{}}
	a, b := BucketKey{Tenant: "a"}, BucketKey{Tenant: "b"}
	const h = 42
	sh.addLocked(h, &memEntry{key: a, fullAt: 10})
	sh.addLocked(h, &memEntry{key: b, fullAt: 20})
	if e := sh.getLocked(h, a); e == nil || e.key != a {
		t.Fatalf("get a = %+v", e)
	}
	if e := sh.getLocked(h, b); e == nil || e.key != b {
		t.Fatalf("get b = %+v", e)
	}
	if e := sh.getLocked(h, BucketKey{Tenant: "c"}); e != nil {
		t.Fatalf("get c = %+v, want nil", e)
	}
	sh.sweepLocked(15) // a is full, b is not
	if e := sh.getLocked(h, a); e != nil {
		t.Fatalf("a survived its sweep: %+v", e)
	}
	if e := sh.getLocked(h, b); e == nil || e.key != b {
		t.Fatalf("b lost after a's sweep: %+v", e)
	}
	// A new a while b sits in overflow: no duplicate b is made.
	sh.addLocked(h, &memEntry{key: a, fullAt: 30})
	if e := sh.getLocked(h, b); e == nil || e.fullAt != 20 {
		t.Fatalf("b after re-adding a: %+v", e)
	}
}

// TestRelimitNotUndoneByALateTake: a take decided under the old limit and
// made after a reload's Relimit (the request read the config just before
// the reload) set the bucket's full instant back to the old limit's, so
// the bucket was forgotten then and came back full.
func TestRelimitNotUndoneByALateTake(t *testing.T) {
	s := NewMemoryStore(MemoryStoreOptions{Shards: 1, SweepInterval: time.Hour})
	k := BucketKey{Tenant: "initech"}
	before, after := Limit{Rate: 10, Burst: 10}, Limit{Rate: 1, Burst: 10}
	s.TakeAt(0, k, before, 10) // empty: full at 1 s under the old limit, 10 s under the new
	s.Relimit(func(BucketKey) (Limit, bool) { return after, true })
	if r := s.TakeAt(int64(500*time.Millisecond), k, before, 1); !r.Allowed { // late, under the old limit
		t.Fatalf("late take: %+v", r)
	}
	s.Sweep(int64(2 * time.Second))
	if got := s.Len(); got != 1 {
		t.Fatalf("after a sweep at 2 s: Len %d, want 1 (the bucket is not full under the new limit)", got)
	}
}

// BenchmarkMemoryStoreTakeOneGoroutine100kTenantsStrided is the one
// goroutine benchmark with the keys taken in a stride, so that the caller's
// keys are not in cache either: the cost of a store whose every bucket
// access is a miss.
func BenchmarkMemoryStoreTakeOneGoroutine100kTenantsStrided(b *testing.B) {
	s, keys, l := memStore100k()
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if i += 7919; i >= len(keys) {
			i -= len(keys)
		}
		s.Take(context.Background(), keys[i], l, 1)
	}
}
