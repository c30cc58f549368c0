package redisstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/redistest"
)

// TestClusterSlowMaster: one master of three stalls (CLIENT PAUSE). Its
// own breaker opens and its tenants are decided by the failure policy;
// the other masters' tenants keep being decided by Redis, with their
// breakers closed. With one breaker for the whole cluster (before), the
// stalled master opened it for every tenant.
func TestClusterSlowMaster(t *testing.T) {
	cl := redistest.StartCluster(t)
	s := newTestStore(t, cl.Addrs(), nil, Options{})
	ctx := context.Background()
	// Tenants by the master that holds their slot.
	byNode := map[string][]ratelimit.BucketKey{}
	for i := 0; len(byNode) < 3 || i < 60; i++ {
		k := ratelimit.BucketKey{Tenant: fmt.Sprint("tenant-", i)}
		node, err := s.cluster.MasterForKey(ctx, bucketKey(k))
		if err != nil {
			t.Fatal(err)
		}
		byNode[node.Options().Addr] = append(byNode[node.Options().Addr], k)
	}
	for _, keys := range byNode {
		untilFromRedis(t, s, keys[0])
	}
	// A grouped request on a cluster: one script, two keys, one slot.
	group := []ratelimit.Take{{Key: ratelimit.BucketKey{Tenant: "tenant-1", Scope: "export"}, Limit: bigLimit, Cost: 1},
		{Key: ratelimit.BucketKey{Tenant: "tenant-1"}, Limit: bigLimit, Cost: 1}}
	if res, out, err := s.DecideAll(ctx, group); err != nil || out.Source != FromRedis || !res[0].Allowed {
		t.Fatalf("TakeAll on a cluster: %+v %+v %v", res, out, err)
	}

	slow := cl.Addrs()[0]
	if _, err := redistest.Do(slow, "CLIENT", "PAUSE", "1500", "ALL"); err != nil {
		t.Fatal(err)
	}
	defer redistest.Do(slow, "CLIENT", "UNPAUSE")
	var mu sync.Mutex
	sources := map[string]*[4]int{}
	for addr := range byNode {
		sources[addr] = &[4]int{}
	}
	var wg sync.WaitGroup
	start := time.Now()
	busy := othersBusy(t, func() {
		defer wg.Wait()
		for w := range 24 {
			addr := cl.Addrs()[w%3]
			keys := byNode[addr]
			wg.Go(func() {
				for i := 0; time.Since(start) < time.Second; i++ {
					_, out, err := s.Decide(ctx, keys[i%len(keys)], bigLimit, 1)
					if err != nil {
						t.Errorf("Decide: %v", err)
						return
					}
					mu.Lock()
					sources[addr][out.Source]++
					mu.Unlock()
					time.Sleep(time.Millisecond) // paced like requests
				}
			})
		}
	}, cl.Servers[0].Pid(), cl.Servers[1].Pid(), cl.Servers[2].Pid())
	breakers := s.NodeBreakers()
	for addr, src := range sources {
		total := src[FromRedis] + src[FromPolicy]
		t.Logf("%s: redis %d, policy %d, breaker %v", addr, src[FromRedis], src[FromPolicy], breakers[addr])
		if addr == slow {
			if src[FromPolicy] == 0 || breakers[addr] == BreakerClosed {
				t.Errorf("stalled master %s: %d policy decisions, breaker %v; want its breaker open", addr, src[FromPolicy], breakers[addr])
			}
			continue
		}
		if busy {
			continue // other processes starve these masters too: not judged
		}
		if float64(src[FromPolicy]) > 0.01*float64(total) || breakers[addr] != BreakerClosed {
			t.Errorf("healthy master %s: %d of %d decisions by the policy, breaker %v; want Redis and closed", addr, src[FromPolicy], total, breakers[addr])
		}
	}
	if got := s.BreakerState(); got != BreakerOpen {
		t.Errorf("store's breaker state %v, want open (the worst of its masters')", got)
	}
}
