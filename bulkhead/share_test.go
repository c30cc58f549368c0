package bulkhead

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// acquireReq starts an Acquire of r in its own goroutine and lets it block.
func acquireReq(ctx context.Context, ps *Pools, pool string, r Request) <-chan result {
	ch := make(chan result, 1)
	go func() {
		s, err := ps.Acquire(ctx, pool, r)
		ch <- result{seat: s, err: err}
	}()
	synctest.Wait()
	return ch
}

// A tenant's cap counts its requests holding seats, not those queued: a
// tenant at its cap waits in the queue while another tenant's request
// takes the free seat, and its own queued request gets a seat as soon as
// one of its requests ends.
func TestCapCountsExecutingRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps := onePool(t, 4, PoolConfig{Share: 1, QueueLength: 8, MaxWait: time.Minute})
		capped := Request{Tenant: "a", Cost: 1, Cap: 2}
		a1, a2 := acquireReq(t.Context(), ps, "p", capped), acquireReq(t.Context(), ps, "p", capped)
		s1, s2 := (<-a1).seat, (<-a2).seat
		a3 := acquireReq(t.Context(), ps, "p", capped) // at its cap: waits, though seats are free
		select {
		case r := <-a3:
			t.Fatalf("third request of a tenant capped at 2 got %+v", r)
		default:
		}
		if got := ps.Executing("a"); got != 2 {
			t.Errorf("Executing(a) = %d, want 2 (the queued one does not count)", got)
		}
		b := <-acquireReq(t.Context(), ps, "p", Request{Tenant: "b", Cost: 1})
		if b.err != nil {
			t.Fatalf("another tenant behind a capped one: %v; want a free seat", b.err)
		}
		s1.Release()
		synctest.Wait()
		r3 := <-a3
		if r3.err != nil {
			t.Fatalf("capped request after one of its tenant's ended: %v", r3.err)
		}
		for _, s := range []Seat{s2, r3.seat, b.seat} {
			s.Release()
		}
		checkDrained(t, ps)
	})
}

// Negative control: without a cap the same tenant takes every seat.
func TestNoCapTakesEverySeat(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps := onePool(t, 4, PoolConfig{Share: 1, QueueLength: 8, MaxWait: time.Minute})
		var seats []Seat
		for range 4 {
			r := <-acquireReq(t.Context(), ps, "p", Request{Tenant: "a", Cost: 1})
			if r.err != nil {
				t.Fatalf("uncapped: %v", r.err)
			}
			seats = append(seats, r.seat)
		}
		if got := ps.Executing("a"); got != 4 {
			t.Errorf("Executing(a) = %d, want 4", got)
		}
		for _, s := range seats {
			s.Release()
		}
	})
}

// drive sends a request of tenant (in flow, "" for the tenant's own) to
// pool p every interval until ctx is done; each granted request holds its
// seat for hold. Refusals are what the test looks at through Share, so
// they are dropped here.
func drive(ctx context.Context, ps *Pools, tenant, flow string, every, hold time.Duration) {
	go func() {
		for {
			go func() {
				s, err := ps.Acquire(ctx, "p", Request{Tenant: tenant, Flow: flow, Cost: 1})
				if err == nil {
					sleepCtx(ctx, hold)
					s.Release()
				}
			}()
			if !sleepCtx(ctx, every) {
				return
			}
		}
	}()
}

// sleepCtx sleeps for d or until ctx is done, and reports whether it slept
// all of d.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// A tenant alone may use every seat and stays within its share; once it
// asks for more seats than there are (requests arriving faster than its
// seats free) it is above it; a tenant that sends a request now and then
// beside it is within its share, however long other tenants keep its
// requests waiting.
func TestShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps := onePool(t, 4, PoolConfig{Share: 1, QueueLength: 16, MaxWait: time.Minute})
		ctx, stop := context.WithCancel(t.Context())
		drive(ctx, ps, "loud", "", 40*time.Millisecond, 100*time.Millisecond) // 2.5 seats of 4
		time.Sleep(3 * UsageWindow)
		if st := ps.Share("p", "loud"); !st.Within {
			t.Errorf("a tenant alone asking for 2.5 of 4 seats: %+v; want within share", st)
		}
		stop()
		synctest.Wait()

		ctx, stop = context.WithCancel(t.Context())
		defer func() { stop(); synctest.Wait() }()
		drive(ctx, ps, "loud", "", 10*time.Millisecond, 100*time.Millisecond) // 10 seats of 4
		time.Sleep(3 * UsageWindow)
		if st := ps.Share("p", "loud"); st.Within {
			t.Errorf("a tenant alone asking for 10 of 4 seats: %+v; want above its share", st)
		}
		drive(ctx, ps, "quiet", "", 200*time.Millisecond, 20*time.Millisecond)
		time.Sleep(3 * UsageWindow)
		loud, q := ps.Share("p", "loud"), ps.Share("p", "quiet")
		if loud.Within || !q.Within {
			t.Errorf("loud %+v, quiet %+v; want loud above its share and quiet within", loud, q)
		}
	})
}

// A full queue takes a request of a tenant within its share even when no
// flow is longer than the newcomer's would be, by pushing out the newest
// request of a longest flow whose tenant is above its share; a newcomer
// above its own share is refused (the negative control).
func TestFullQueueMakesRoomForATenantWithinItsShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps := onePool(t, 1, PoolConfig{Share: 1, QueueLength: 2, MaxWait: time.Minute})
		ctx, stop := context.WithCancel(t.Context())
		defer func() { stop(); synctest.Wait() }()
		// heavy asks for 5 seats of 1, in two flows of one request
		// each at a time: its queue is full and no flow is longer
		// than one.
		drive(ctx, ps, "heavy", "heavy/a", 400*time.Millisecond, 2*time.Second)
		drive(ctx, ps, "heavy", "heavy/b", 400*time.Millisecond, 2*time.Second)
		time.Sleep(3 * UsageWindow)
		if st := stats(t, ps, "p"); st.Queued != 2 {
			t.Fatalf("queued %d, want the queue full (2)", st.Queued)
		}
		if _, err := ps.Acquire(t.Context(), "p", Request{Tenant: "heavy", Flow: "heavy/c", Cost: 1}); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("heavy's third flow at a full queue: %v, want ErrQueueFull", err)
		}
		light := acquireReq(t.Context(), ps, "p", Request{Tenant: "light", Cost: 1})
		select {
		case r := <-light:
			t.Fatalf("light at a full queue: %+v, want it queued in place of one of heavy's", r)
		default:
		}
		if st := stats(t, ps, "p"); st.Queued != 2 {
			t.Fatalf("queued %d after light came, want 2 (one of heavy's pushed out)", st.Queued)
		}
		r := <-light // granted the next seat, before heavy's older one
		if r.err != nil {
			t.Fatalf("light: %v", r.err)
		}
		r.seat.Release()
	})
}

// A tenant's one request at a time is no flood: back after a quiet spell,
// its use does not count the request it holds until one has ended; two
// more at once do count.
func TestLoneRequestIsNoFlood(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps := onePool(t, 4, PoolConfig{Share: 1, QueueLength: 4, MaxWait: time.Second})
		s := mustAcquire(t, ps, "p", "a")
		time.Sleep(10 * time.Millisecond)
		s.Release()
		time.Sleep(10 * UsageWindow) // quiet: what it did has faded
		s = mustAcquire(t, ps, "p", "a")
		if use := ps.Share("p", "a").Use; use > 0.01 {
			t.Errorf("one request back after a quiet spell: use %.3f; want ~0", use)
		}
		more := []Seat{mustAcquire(t, ps, "p", "a"), mustAcquire(t, ps, "p", "a")}
		if use := ps.Share("p", "a").Use; use < 2 {
			t.Errorf("three requests at once, none ended: use %.3f; want ≥ 2", use)
		}
		for _, m := range append(more, s) {
			m.Release()
		}
	})
}

// lightBehindLighter: pool p of 2 seats, one held for the whole run by
// hog's one long request; light sends a 10 ms read every 250 ms and
// lighter one every second. noFloor lets light keep headroom for lighter.
func lightBehindLighter(t *testing.T, noFloor bool) (light flowReport) {
	ps := onePool(t, 2, PoolConfig{Share: 1, QueueLength: 8, MaxWait: 500 * time.Millisecond}, withoutIf(noFloor, ruleFloor))
	arrivals := []arrival{{at: 0, pool: "p", flow: "hog", service: 6 * time.Second}}
	arrivals = append(arrivals, openLoop("p", "light", time.Millisecond, 5*time.Second, 250*time.Millisecond, 10*time.Millisecond)...)
	arrivals = append(arrivals, openLoop("p", "lighter", 600*time.Millisecond, 5*time.Second, time.Second, 10*time.Millisecond)...)
	reports, _ := play(t, ps, arrivals)
	return reports["light"]
}

// Tenants using a small part of a seat keep nothing back from each other,
// however their uses compare: light's reads take the one free seat at
// once, though lighter uses a quarter as much.
func TestLightTenantsKeepNoHeadroomFromEachOther(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		light := lightBehindLighter(t, false)
		t.Logf("light: %v", light)
		if light.completion() < 1 || light.maxWait > 0 {
			t.Errorf("light: %v; want every read served at once", light)
		}
	})
}

// Negative control: without the floor, light keeps the free seat for
// lighter, and its own reads wait.
func TestWithoutFloorLightWaitsForLighter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		light := lightBehindLighter(t, true)
		t.Logf("light without the floor: %v", light)
		if light.completion() == 1 && light.maxWait == 0 {
			t.Errorf("light without the floor: %v; the test above cannot fail", light)
		}
	})
}

// heavyWhileLent: pool p lent both its lendable seats to q's borrower (3 s
// requests) while idle; then p's light tenant sends a 10 ms read every
// 25 ms and p's heavy tenant floods 300 ms exports. It returns the most
// seats heavy held while p's seats were lent.
func heavyWhileLent(t *testing.T, heavyReclaims bool) int {
	ps := newPools(t, 8, map[string]PoolConfig{
		"p": {Share: 1, LendablePercent: 50, QueueLength: 50, MaxWait: time.Second},
		"q": {Share: 1, BorrowingPercent: 100, QueueLength: 50, MaxWait: 5 * time.Second},
	}, withoutIf(heavyReclaims, ruleLentStaysForLighter))
	arrivals := openLoop("q", "borrower", 0, 600*time.Millisecond, 100*time.Millisecond, 3*time.Second)
	arrivals = append(arrivals, openLoop("p", "light", 700*time.Millisecond, 3*time.Second, 25*time.Millisecond, 10*time.Millisecond)...)
	arrivals = append(arrivals, openLoop("p", "heavy", time.Second, 3*time.Second, 50*time.Millisecond, 300*time.Millisecond)...)
	most := 0
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			ps.mu.Lock()
			if u := ps.byName["p"].users["heavy"]; u != nil && ps.byName["p"].lent > 0 {
				most = max(most, u.held.Level())
			}
			ps.mu.Unlock()
		}
	}()
	play(t, ps, arrivals)
	close(stop)
	<-done
	return most
}

// A heavy tenant whose pool lent seats out gets them back only beyond the
// headroom it owes its lighter neighbours: of p's 4 seats, light (a read
// every 25 ms, a use of 0.4) is owed 2, so heavy holds at most 2 while the
// lent seats are out. With heavyReclaims it takes 3.
func TestHeavyTenantReclaimsNoHeadroom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		got := heavyWhileLent(t, false)
		t.Logf("heavy held at most %d seats while p lent 2", got)
		if got > 2 {
			t.Errorf("heavy held %d of p's 4 seats while 2 were lent; want at most 2", got)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		got := heavyWhileLent(t, true)
		t.Logf("with heavyReclaims: %d", got)
		if got <= 2 {
			t.Errorf("with heavyReclaims heavy held at most %d seats: the check above cannot fail", got)
		}
	})
}

// queueBesideAnInnocent: pool p of 1 seat and a queue of 2. heavy holds
// the seat and queues one request; a while later other, within its
// share, queues one; then light comes to the full queue. It returns what
// became of other's request and of light's (nil while still queued).
// anyLongest looks only at the longest flow last to grow (other's).
func queueBesideAnInnocent(t *testing.T, anyLongest bool) (other, light error) {
	synctest.Test(t, func(t *testing.T) {
		ps := onePool(t, 1, PoolConfig{Share: 1, QueueLength: 2, MaxWait: time.Minute}, withoutIf(anyLongest, ruleHeaviestOfLongest))
		ctx, stop := context.WithCancel(t.Context())
		defer func() { stop(); synctest.Wait() }()
		held := mustAcquire(t, ps, "p", "heavy")
		defer held.Release()
		heavy := acquireReq(ctx, ps, "p", Request{Tenant: "heavy", Cost: 1})
		time.Sleep(3 * UsageWindow)
		o := acquireReq(ctx, ps, "p", Request{Tenant: "other", Cost: 1})
		l := acquireReq(ctx, ps, "p", Request{Tenant: "light", Cost: 1})
		pending := func(ch <-chan result) error {
			select {
			case r := <-ch:
				if r.err == nil {
					r.seat.Release()
					return errors.New("granted")
				}
				return r.err
			default:
				return nil
			}
		}
		other, light = pending(o), pending(l)
		if h := pending(heavy); other == nil && light == nil && !errors.Is(h, ErrQueueFull) {
			t.Errorf("heavy's queued request: %v; want it pushed out (ErrQueueFull)", h)
		}
	})
	return other, light
}

// A full queue whose longest flows hold one request each pushes out the
// newest request of the one whose tenant is furthest above its share, not
// refuse a tenant within its share because the flow it looked at first
// was another's within its share. Negative control: looking only at the
// longest flow last to grow, light is refused.
func TestFullQueuePushesOutTheHeaviestOfTheLongest(t *testing.T) {
	other, light := queueBesideAnInnocent(t, false)
	if other != nil || light != nil {
		t.Errorf("other: %v, light: %v; want both queued, heavy's request pushed out", other, light)
	}
	_, light = queueBesideAnInnocent(t, true)
	if !errors.Is(light, ErrQueueFull) {
		t.Errorf("looking at the last longest flow only, light: %v; want ErrQueueFull (the test above cannot fail)", light)
	}
}
