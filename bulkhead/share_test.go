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

// A tenant alone may use every seat and stays within its share; once it
// also keeps requests queued it is above it; a tenant that sends a request
// now and then beside it is within its share.
func TestShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps := onePool(t, 4, PoolConfig{Share: 1, QueueLength: 16, MaxWait: time.Minute})
		var held []Seat
		for range 4 {
			held = append(held, mustAcquire(t, ps, "p", "loud"))
		}
		time.Sleep(3 * UsageWindow)
		if st := ps.Share("p", "loud"); !st.Within {
			t.Errorf("a tenant alone on every seat: %+v; want within share (it may use everything)", st)
		}
		var queued []<-chan result
		for range 6 {
			queued = append(queued, acquireReq(t.Context(), ps, "p", Request{Tenant: "loud", Cost: 1}))
		}
		time.Sleep(3 * UsageWindow)
		if st := ps.Share("p", "loud"); st.Within {
			t.Errorf("a tenant alone with 6 queued beyond 4 seats: %+v; want above its share", st)
		}
		quiet := acquireReq(t.Context(), ps, "p", Request{Tenant: "quiet", Cost: 1})
		time.Sleep(UsageWindow / 10)
		loud, q := ps.Share("p", "loud"), ps.Share("p", "quiet")
		if loud.Within || !q.Within {
			t.Errorf("loud %+v, quiet %+v; want loud above its share and quiet within", loud, q)
		}
		for _, s := range held {
			s.Release()
		}
		synctest.Wait()
		for _, ch := range append(queued, quiet) {
			(<-ch).seat.Release()
			synctest.Wait()
		}
		checkDrained(t, ps)
	})
}

// A full queue takes a request of a tenant within its share even when no
// flow is longer than the newcomer's would be, by pushing out the newest
// request of a longest flow whose tenant is above its share; a newcomer
// above its own share is refused (the negative control).
func TestFullQueueMakesRoomForATenantWithinItsShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps := onePool(t, 1, PoolConfig{Share: 1, QueueLength: 2, MaxWait: time.Minute})
		held := mustAcquire(t, ps, "p", "heavy")
		a := acquireReq(t.Context(), ps, "p", Request{Tenant: "heavy", Flow: "heavy/a", Cost: 1})
		b := acquireReq(t.Context(), ps, "p", Request{Tenant: "heavy", Flow: "heavy/b", Cost: 1})
		time.Sleep(3 * UsageWindow) // heavy: 3 held or queued against 1 seat

		if _, err := ps.Acquire(t.Context(), "p", Request{Tenant: "heavy", Flow: "heavy/c", Cost: 1}); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("heavy's third flow at a full queue: %v, want ErrQueueFull", err)
		}
		light := acquireReq(t.Context(), ps, "p", Request{Tenant: "light", Cost: 1})
		pushed := 0
		for _, ch := range []<-chan result{a, b} {
			select {
			case r := <-ch:
				if !errors.Is(r.err, ErrQueueFull) {
					t.Fatalf("heavy's queued request ended with %v", r.err)
				}
				pushed++
			default:
			}
		}
		if pushed != 1 {
			t.Fatalf("%d of heavy's queued requests pushed out for light's, want 1", pushed)
		}
		held.Release()
		synctest.Wait()
		r := <-light
		if r.err != nil {
			t.Fatalf("light: %v", r.err)
		}
		r.seat.Release()
		synctest.Wait()
	})
}
