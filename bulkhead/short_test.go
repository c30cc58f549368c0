package bulkhead

import (
	"testing"
	"testing/synctest"
	"time"
)

// A request is short (OnShort) when every seat it may reach is taken, not
// when it waits beside a free seat kept as headroom for a lighter tenant,
// nor when its tenant is at its cap: only the first is demand a higher
// total would serve as the pools stand.
func TestShortOnlyWhenNoSeatIsReachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		shorts := 0
		ps, err := NewPools(Config{Total: 4, Pools: map[string]PoolConfig{"p": {Share: 1, QueueLength: 8, MaxWait: time.Minute}}},
			OnShort(func() { shorts++ }))
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		// The light tenant has used the pool a little: the loud one
		// keeps it a seat of headroom.
		s := (<-acquireReq(ctx, ps, "p", Request{Tenant: "light"})).seat
		time.Sleep(10 * time.Millisecond)
		s.Release()
		var held []Seat
		for range 3 {
			held = append(held, (<-acquireReq(ctx, ps, "p", Request{Tenant: "loud"})).seat)
		}
		loud := acquireReq(ctx, ps, "p", Request{Tenant: "loud"})
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
