package bulkhead

import (
	"testing"
	"testing/synctest"
	"time"
)

// onsetRead plays, in one pool of 2 seats, a light tenant's 10 ms read
// (cost 1); then two tenants never seen before each send an export (cost
// 10, its hold not learnt yet: taken as ten reads'), and the light tenant
// a read. It returns how long the read waited, or -1 if it is still
// waiting after 100 ms. short switches ruleLongIsHeavy off.
func onsetRead(t *testing.T, short bool) time.Duration {
	t.Helper()
	waited := time.Duration(-1)
	synctest.Test(t, func(t *testing.T) {
		ps := onePool(t, 2, PoolConfig{Share: 1, QueueLength: 8, MaxWait: time.Minute}, withoutIf(short, ruleLongIsHeavy))
		ctx := t.Context()
		s := (<-acquireReq(ctx, ps, "p", Request{Tenant: "light", Cost: 1})).seat
		time.Sleep(10 * time.Millisecond)
		s.Release()
		exports := []<-chan result{
			acquireReq(ctx, ps, "p", Request{Tenant: "new-1", Cost: 10}),
			acquireReq(ctx, ps, "p", Request{Tenant: "new-2", Cost: 10}),
		}
		read := acquireReq(ctx, ps, "p", Request{Tenant: "light", Cost: 1})
		select {
		case r := <-read:
			waited = r.seat.Waited()
			r.seat.Release()
		case <-time.After(100 * time.Millisecond):
			defer func() { (<-read).seat.Release() }()
		}
		for _, ch := range exports {
			defer func() { (<-ch).seat.Release() }()
		}
	})
	return waited
}

// The headroom is for short requests: a tenant seen for the first time is
// the lightest of all, but its first request, if long, does not take the
// seat kept for the lighter tenants' reads, nor does the seat it holds
// count as theirs. At a flood's onset in many-tenants the floods' first
// exports took those seats, and the innocents' reads waited for exports
// to end. Negative control: long requests taking the headroom like short
// ones; the read waits.
func TestLongRequestLeavesTheHeadroom(t *testing.T) {
	if w := onsetRead(t, false); w != 0 {
		t.Errorf("a light tenant's read beside two newcomers' exports waited %v; want a free seat at once", w)
	}
	if w := onsetRead(t, true); w == 0 {
		t.Errorf("negative control: with long requests taking the headroom, the read found a seat at once: the test cannot fail")
	}
}

// Arrive tells the shedder how long the request will hold its seat: its
// class's mean hold once learnt, until then the quickest class's scaled by
// cost, and nothing before any hold is known.
func TestArriveReportsTheRequestsHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps := onePool(t, 2, PoolConfig{Share: 1, QueueLength: 8, MaxWait: time.Minute})
		read, export := Request{Tenant: "a", Cost: 1, Class: 1}, Request{Tenant: "a", Cost: 10, Class: 2}
		if h := ps.Arrive("p", read).Hold; h != 0 {
			t.Errorf("hold before any is learnt = %v, want 0", h)
		}
		s := (<-acquireReq(t.Context(), ps, "p", Request{Tenant: "a", Cost: 1, Class: 1, Arrived: true})).seat
		time.Sleep(5 * time.Millisecond)
		s.Release()
		if h := ps.Arrive("p", export).Hold; h != 50*time.Millisecond {
			t.Errorf("an export's hold before its own is learnt = %v, want 50ms (the read's 5 ms × cost 10)", h)
		}
		s = (<-acquireReq(t.Context(), ps, "p", Request{Tenant: "a", Cost: 10, Class: 2, Arrived: true})).seat
		time.Sleep(300 * time.Millisecond)
		s.Release()
		if h := ps.Arrive("p", export).Hold; h != 300*time.Millisecond {
			t.Errorf("an export's learnt hold = %v, want 300ms", h)
		}
	})
}
