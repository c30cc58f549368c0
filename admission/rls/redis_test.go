package rls

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/admission/redisstore"
	"github.com/fairgate/fairgate/internal/redistest"
)

// newRedisStore returns a Redis store on addr, closed when t ends.
func newRedisStore(t testing.TB, addrs ...string) *redisstore.Store {
	t.Helper()
	// Fail closed with a generous deadline: a decision Redis did not make
	// is an error here, never a silent local one.
	cfg := redisstore.Config{Addrs: addrs, Cluster: len(addrs) > 1, FailurePolicy: redisstore.FailClosed, Timeout: time.Second}
	client, err := redisstore.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	s, err := redisstore.New(client, cfg, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestInstancesOnOneRedisAdmitAsOne: three services, each with its own
// Redis store on one redis-server, called concurrently, admit what one
// would: the limit, not three times it.
func TestInstancesOnOneRedisAdmitAsOne(t *testing.T) {
	srv := redistest.StartServer(t)
	rules := mustRules(t, Source{"q.yaml", []byte("domain: q\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 30}\n")})
	var hs []*harness
	for range 3 {
		hs = append(hs, start(t, Config{}, rules, Options{Store: newRedisStore(t, srv.Addr())}))
	}
	var admitted, rejected atomic.Int64
	var wg sync.WaitGroup
	for w := range 9 {
		h := hs[w%len(hs)]
		wg.Go(func() {
			for range 15 {
				resp, err := h.client.ShouldRateLimit(context.Background(), request("q", 0, desc("user", "ann")))
				if err != nil {
					t.Error(err)
					return
				}
				if resp.OverallCode == ok {
					admitted.Add(1)
				} else {
					rejected.Add(1)
					if d := resp.Statuses[0].DurationUntilReset.AsDuration(); d <= 0 || d > 2*60e9 {
						t.Errorf("duration_until_reset %v, want about 2 minutes (one token of 30/hour)", d)
					}
				}
			}
		})
	}
	wg.Wait()
	// 30 an hour refills one token per 2 minutes: within the test, none.
	if got := admitted.Load(); got != 30 {
		t.Fatalf("three instances admitted %d, want 30 (rejected %d)", got, rejected.Load())
	}
	// Another user has its own bucket, on both instances.
	if resp := hs[1].call(t, request("q", 0, desc("user", "bo"))); resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 29 {
		t.Fatalf("another user: %v", resp)
	}
}

// TestRedisCluster: on a three-master Redis Cluster, each domain's
// buckets share one hash slot (so that a request's descriptors are
// charged in one Lua call), domains spread over the masters, and every
// bucket still admits exactly its limit, a request of two descriptors all
// or nothing.
func TestRedisCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	var srcs []Source
	for d := range 12 {
		name := "q" + strconv.Itoa(d)
		srcs = append(srcs, Source{name + ".yaml", []byte("domain: " + name + "\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 3}\n" +
			"  - key: team\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")})
	}
	h := start(t, Config{}, mustRules(t, srcs...), Options{Store: newRedisStore(t, cl.Addrs()...)})
	for d := range 12 {
		domain := "q" + strconv.Itoa(d)
		for u := range 2 {
			user := "u" + strconv.Itoa(u)
			for i := range 4 {
				resp := h.call(t, request(domain, 0, desc("user", user), desc("team", "t")))
				// The team's 5 bind on u1's third call; u0 took 3.
				want := i == 3 || u == 1 && i == 2
				if (resp.OverallCode == over) != want {
					t.Fatalf("%s %s call %d: %v", domain, user, i+1, resp)
				}
			}
		}
		// u1 was charged twice (its refused calls took nothing).
		if resp := h.call(t, request(domain, 0, desc("user", "u1"))); resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 0 {
			t.Fatalf("%s: u1 alone: %v, want its last token", domain, resp)
		}
	}
	holding := 0
	for _, a := range cl.Addrs() {
		if n, err := redistest.Do(a, "DBSIZE"); err == nil && n != "0" {
			holding++
		}
	}
	if holding < 2 {
		t.Fatalf("12 domains' buckets on %d of 3 masters, want them spread", holding)
	}
}

// TestSettleOnStreamDoneRedis: settlements on the Redis store, one Lua
// call each, as on the embedded store.
func TestSettleOnStreamDoneRedis(t *testing.T) {
	srv := redistest.StartServer(t)
	testSettleOnStreamDone(t, func(t *testing.T) *harness {
		return start(t, Config{}, mustRules(t, tokensRules), Options{Store: newRedisStore(t, srv.Addr())})
	})
}
