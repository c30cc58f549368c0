package bulkhead

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// loudBesideLight plays, in pool p of 4 seats, a light tenant's request of
// 10 ms and then four of a loud tenant, inside a synctest bubble: the light
// tenant has used the pool a little, so the loud one keeps it a seat of
// headroom, and its fourth request waits beside that seat. It returns the
// loud tenant's three seats and its fourth request's result. ps is built
// without ruleArrivalSeat, so that the headroom is that one seat.
func loudBesideLight(ctx context.Context, ps *Pools) ([]Seat, <-chan result) {
	s := (<-acquireReq(ctx, ps, "p", Request{Tenant: "light"})).seat
	time.Sleep(10 * time.Millisecond)
	s.Release()
	var held []Seat
	for range 3 {
		held = append(held, (<-acquireReq(ctx, ps, "p", Request{Tenant: "loud"})).seat)
	}
	return held, acquireReq(ctx, ps, "p", Request{Tenant: "loud"})
}

// A request is short (OnShort) when every seat it may reach is taken, not
// when it waits beside a free seat kept as headroom for a lighter tenant,
// nor when its tenant is at its cap: only the first is demand a higher
// total would serve as the pools stand.
func TestShortOnlyWhenNoSeatIsReachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shorts := 0
		ps, err := NewPools(Config{Total: 4, Pools: map[string]PoolConfig{"p": {Share: 1, QueueLength: 8, MaxWait: time.Minute}}},
			OnShort(func() { shorts++ }), without(ruleArrivalSeat))
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		held, loud := loudBesideLight(ctx, ps)
		if st := stats(t, ps, "p"); st.InFlight != 3 || st.Queued != 1 {
			t.Fatalf("loud's fourth request beside the light tenant's headroom: %+v; want it queued beside the free seat", st)
		}
		if shorts != 0 {
			t.Errorf("a request waiting beside a seat of headroom: %d shorts, want 0", shorts)
		}
		held = append(held, (<-acquireReq(ctx, ps, "p", Request{Tenant: "light"})).seat)
		capped := acquireReq(ctx, ps, "p", Request{Tenant: "capped", Cap: 1})
		if shorts != 1 {
			t.Errorf("a request finding every seat taken: %d shorts, want 1", shorts)
		}
		held[3].Release() // the light tenant's seat: capped takes it
		c := <-capped
		if c.err != nil {
			t.Fatal(c.err)
		}
		shorts = 0
		held[0].Release()
		synctest.Wait()
		atCap := acquireReq(ctx, ps, "p", Request{Tenant: "capped", Cap: 1})
		if shorts != 0 {
			t.Errorf("a request of a tenant at its cap: %d shorts, want 0", shorts)
		}
		c.seat.Release()
		for _, ch := range []<-chan result{loud, atCap} {
			if r := <-ch; r.err == nil {
				r.seat.Release()
			}
		}
		held[1].Release()
		held[2].Release()
		checkDrained(t, ps)
	})
}

// fullQueueSeat runs a light tenant's request into a pool whose one-place
// queue holds a request of a heavier tenant, waiting beside the seat of
// headroom kept for the light one; both tenants are within their shares
// (their uses add up to fewer than the seats), so nothing may be pushed
// out. It returns the light request's error. waits switches ruleFreeSeatBesideFullQueue off.
func fullQueueSeat(t *testing.T, waits bool) error {
	t.Helper()
	var err error
	synctest.Test(t, func(t *testing.T) {
		ps := onePool(t, 4, PoolConfig{Share: 1, QueueLength: 1, MaxWait: time.Minute}, without(ruleArrivalSeat), withoutIf(waits, ruleFreeSeatBesideFullQueue))
		ctx := t.Context()
		held, queued := loudBesideLight(ctx, ps)
		r := <-acquireReq(ctx, ps, "p", Request{Tenant: "light"})
		err = r.err
		if err == nil {
			held = append(held, r.seat)
		}
		for _, s := range held {
			s.Release()
		}
		if q := <-queued; q.err == nil {
			q.seat.Release()
		}
		checkDrained(t, ps)
	})
	return err
}

// A light tenant's request takes the free seat kept as its headroom even
// when the queue beside it is full of heavier tenants' requests that may
// not take it. At a flood's onset, its tenants still within their shares,
// many-tenants' starter pool (a queue of 4) lost an innocent's request to
// queue_full so, its seats free. Negative control: a free seat taken at
// once only beside an empty queue.
func TestFullQueueLeavesTheHeadroomToALightTenant(t *testing.T) {
	if err := fullQueueSeat(t, false); err != nil {
		t.Errorf("light request beside a full queue and a free seat of its headroom: %v; want the seat", err)
	}
	if err := fullQueueSeat(t, true); !errors.Is(err, ErrQueueFull) {
		t.Errorf("negative control: taking a seat at once only beside an empty queue gave %v, not ErrQueueFull: the test cannot fail", err)
	}
}
