package bulkhead

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func BenchmarkSeatAcquireRelease(b *testing.B) {
	ps, err := NewPools(Config{Total: 64, Pools: map[string]PoolConfig{
		"gold": {Share: 1, QueueLength: 64, MaxWait: time.Second},
	}})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("uncontended", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s, err := ps.Acquire(ctx, "gold", Request{Tenant: "acme", Cost: 1})
			if err != nil {
				b.Fatal(err)
			}
			s.Release()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				s, err := ps.Acquire(ctx, "gold", Request{Tenant: "acme", Cost: 1})
				if err != nil {
					b.Error(err)
					return
				}
				s.Release()
			}
		})
	})
	// More goroutines than seats: requests queue and hand seats over.
	b.Run("parallel-queued", func(b *testing.B) {
		ps, err := NewPools(Config{Total: 2, Pools: map[string]PoolConfig{
			"gold": {Share: 1, QueueLength: 1024, MaxWait: time.Minute},
		}})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.SetParallelism(8)
		var id atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			flow := strconv.FormatInt(id.Add(1), 10)
			for pb.Next() {
				s, err := ps.Acquire(ctx, "gold", Request{Tenant: flow, Cost: 1})
				if err != nil {
					b.Error(err)
					return
				}
				s.Release()
			}
		})
	})
}

func BenchmarkCapsTryAcquireRelease(b *testing.B) {
	c := NewCaps()
	tenants := make([]string, 64)
	for i := range tenants {
		tenants[i] = "tenant-" + strconv.Itoa(i)
	}
	b.Run("uncontended", func(b *testing.B) {
		b.ReportAllocs()
		held, _ := c.TryAcquire("acme", 2) // keep acme's entry: a known tenant
		defer held.Release()
		for b.Loop() {
			s, ok := c.TryAcquire("acme", 2)
			if !ok {
				b.Fatal("refused under its cap")
			}
			s.Release()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		var id atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i := int(id.Add(1))
			for pb.Next() {
				s, ok := c.TryAcquire(tenants[i%len(tenants)], 1<<20)
				if !ok {
					b.Error("refused under a large cap")
					return
				}
				s.Release()
				i++
			}
		})
	})
}

// 10k flows, each keeping a few items queued: one push and one pop per op.
func BenchmarkFairQueuePushPop10kFlows(b *testing.B) {
	const flows = 10000
	keys := make([]string, flows)
	for i := range keys {
		keys[i] = "tenant-" + strconv.Itoa(i)
	}
	q := NewFairQueue[int]()
	for i := range 4 * flows {
		q.Push(keys[i%flows], 1+i%3, i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		q.Push(keys[i%flows], 1+i%3, i)
		if _, ok := q.Pop(); !ok {
			b.Fatal("empty")
		}
		i++
	}
	if q.Flows() > flows {
		b.Fatalf("%d flows; want at most %d", q.Flows(), flows)
	}
}
