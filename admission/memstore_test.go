package admission

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
	s.Sweep(now.Load())
	if got := s.Len(); got != 0 {
		t.Fatalf("after refill and sweep Len = %d, want 0", got)
	}
}

func BenchmarkMemoryStoreTake100kTenants(b *testing.B) {
	s := NewMemoryStore(MemoryStoreOptions{})
	const n = 100_000
	keys := make([]BucketKey, n)
	for i := range keys {
		keys[i] = BucketKey{Tenant: "tenant-" + strconv.Itoa(i)}
	}
	l := Limit{Rate: 1e6, Burst: 1e9}
	for _, k := range keys {
		s.Take(context.Background(), k, l, 1)
	}
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
