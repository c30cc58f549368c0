package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/redistest"
)

// fleetMember is one instance of a changing fleet: its client (closed
// under it to kill it), its store and the callers flooding one bucket
// through it.
type fleetMember struct {
	client   *redis.Client
	store    *Store
	stop     atomic.Bool
	wg       sync.WaitGroup
	admitted *atomic.Int64
}

// waitForCount polls until every one of stores counts want instances,
// failing t after 5 s.
func waitForCount(t *testing.T, want int, what string, stores ...*Store) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ok := true
		for _, s := range stores {
			ok = ok && s.Instances() == want
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			for i, s := range stores {
				t.Errorf("instance %d counts %d", i, s.Instances())
			}
			t.Fatalf("%s: not every instance counts %d within 5 s", what, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMembership: a fleet in sync mode floods one tenant's bucket while
// it changes: three instances, then one killed (no Close: its entry is
// left to expire, and what it took since its last reconciliation is never
// pushed), then one added, then Redis killed. Each instance counts the
// live fleet (within a heartbeat of a join, within memberTTL heartbeats of
// a death), and at every checkpoint the fleet's admissions stay within the
// bound restated for a changing fleet (see members and syncer): the exact
// answer, n × (rate × interval + cost) for the most instances alive at
// once, and for the join the newcomer's share, burst/n, and for the death
// what the dead instance may have taken unpushed, burst/n + rate ×
// interval. With Redis gone the count stays, and the Local policy's shares
// (1/n of the quota each, from full) admit at most one quota more.
//
// The negative control is the count every instance had before
// membership when redis.instances was left out, 1: without Redis each
// instance then enforces the whole quota, and the fleet admits three.
func TestMembership(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fixed int // Config.Instances
		holds bool
	}{
		{"live count", 0, true},
		{"control: every instance counts 1", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.StartServer(t)
			const (
				interval  = 20 * time.Millisecond
				heartbeat = 100 * time.Millisecond
				n         = 3 // the most instances alive at once
				cost      = 1
				phase     = 700 * time.Millisecond
			)
			l := ratelimit.Limit{Rate: 200, Burst: 20}
			k := ratelimit.BucketKey{Tenant: "changing-fleet"}
			var admitted atomic.Int64
			start := time.Now()
			join := func() *fleetMember {
				cfg := Config{Addrs: []string{srv.Addr()}, Mode: Sync, SyncInterval: interval, Heartbeat: heartbeat,
					Instances: tc.fixed, Timeout: 20 * time.Millisecond}
				client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
				t.Cleanup(func() { _ = client.Close() })
				store, err := New(client, cfg, Options{})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = store.Close() })
				m := &fleetMember{client: client, store: store, admitted: &admitted}
				for range 2 {
					m.wg.Go(func() {
						for !m.stop.Load() {
							r, _, err := store.Decide(context.Background(), k, l, cost)
							if err != nil {
								t.Errorf("Decide: %v", err)
								return
							}
							if r.Allowed {
								m.admitted.Add(cost)
							}
							time.Sleep(50 * time.Microsecond) // paced; still far above the quota
						}
					})
				}
				return m
			}
			halt := func(m *fleetMember) { m.stop.Store(true); m.wg.Wait() }

			// over is the worst excess over the bound at a checkpoint;
			// base, from and slack describe the bound: base tokens at
			// instant from, the quota's refill since, and slack beyond.
			var over float64
			base, from := l.Burst, start
			slack := n * (l.Rate*interval.Seconds() + cost)
			check := func(d time.Duration) {
				for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
					got := float64(admitted.Load())
					over = max(over, got-(base+l.Rate*time.Since(from).Seconds()+slack))
				}
			}

			a, b, c := join(), join(), join()
			if tc.holds {
				waitForCount(t, 3, "three instances joined", a.store, b.store, c.store)
			}
			check(phase)

			// c dies: its callers stop, then its client is closed under
			// it, so it neither pushes what it took nor leaves.
			halt(c)
			_ = c.client.Close()
			slack += l.Burst/n + l.Rate*interval.Seconds()
			if tc.holds {
				waitForCount(t, 2, "an instance died", a.store, b.store)
			}
			check(phase)

			// d joins: it counts itself and the two alive at once; a and b
			// count it within a heartbeat.
			d := join()
			slack += l.Burst / n
			if tc.holds {
				if got := d.store.Instances(); got != 3 {
					t.Errorf("a new instance counts %d on joining, want 3 (itself and the two alive)", got)
				}
				waitForCount(t, 3, "an instance joined", a.store, b.store, d.store)
			}
			check(phase)

			// Redis dies: the count stays at 3, and from here the fleet
			// may admit what its views still allowed (at most the bound's
			// slack and a burst) and then the Local policy's shares, a
			// quota between them.
			srv.Kill()
			base, from = float64(admitted.Load())+l.Burst, time.Now()
			check(phase)
			if tc.holds {
				waitForCount(t, 3, "Redis died", a.store, b.store, d.store)
			}
			for _, m := range []*fleetMember{a, b, d} {
				halt(m)
			}
			elapsed := time.Since(start)
			t.Logf("admitted %d over %v (by the policy from %v); worst excess over the bound at a checkpoint %.1f tokens",
				admitted.Load(), elapsed.Round(time.Millisecond), from.Sub(start).Round(time.Millisecond), over)
			// The slack of TestSyncBoundProperty: one cost and 5 ms of
			// refill for the clocks read at different instants.
			holds := over <= cost+0.005*l.Rate
			if holds != tc.holds {
				t.Errorf("bound held: %v, want %v (worst excess %.1f tokens)", holds, tc.holds, over)
			}
		})
	}
}

// TestMembershipLeave: an instance that closes leaves at once: the others
// count one fewer at their next heartbeat, not after its entry expires.
// The set expires with its last entry.
func TestMembershipLeave(t *testing.T) {
	srv := redistest.StartServer(t)
	edit := func(c *Config) { c.Heartbeat = time.Hour } // no renewal during the test: only joins and leaves count
	a := newTestStore(t, []string{srv.Addr()}, edit, Options{})
	b := newTestStore(t, []string{srv.Addr()}, edit, Options{})
	if got := b.Instances(); got != 2 {
		t.Fatalf("second instance counts %d, want 2", got)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.members.beat("join"); err != nil {
		t.Fatal(err)
	}
	if got := a.Instances(); got != 1 {
		t.Errorf("after the other instance closed, %d counted, want 1", got)
	}
	ttl, err := redistest.Do(srv.Addr(), "PTTL", membersKey)
	if err != nil {
		t.Fatal(err)
	}
	if ttl == "-1" {
		t.Errorf("the membership set has no expiry: a fleet gone would leave it behind")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := redistest.Do(srv.Addr(), "EXISTS", membersKey); err != nil || n != "0" {
		t.Errorf("EXISTS %s = %q %v after every instance left, want 0", membersKey, n, err)
	}
}

// TestMembershipOverride: Config.Instances overrides the live count, and
// such an instance still announces itself, so that the others count it.
func TestMembershipOverride(t *testing.T) {
	srv := redistest.StartServer(t)
	fixed := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.Instances = 5 }, Options{})
	live := newTestStore(t, []string{srv.Addr()}, nil, Options{})
	if got := fixed.Instances(); got != 5 {
		t.Errorf("with instances: 5, %d counted", got)
	}
	if got := live.Instances(); got != 2 {
		t.Errorf("beside an instance with instances: 5, the live count is %d, want 2", got)
	}
}
