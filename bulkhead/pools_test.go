package bulkhead

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

func newPools(t *testing.T, total int, pools map[string]PoolConfig, opts ...Option) *Pools {
	t.Helper()
	ps, err := NewPools(Config{Total: total, Pools: pools}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

func onePool(t *testing.T, total int, pc PoolConfig, opts ...Option) *Pools {
	t.Helper()
	return newPools(t, total, map[string]PoolConfig{"p": pc}, opts...)
}

func mustAcquire(t *testing.T, ps *Pools, pool, flow string) Seat {
	t.Helper()
	s, err := ps.Acquire(context.Background(), pool, Request{Tenant: flow, Cost: 1})
	if err != nil {
		t.Fatalf("Acquire(%s, %s): %v", pool, flow, err)
	}
	return s
}

// acquireAsync starts an Acquire in its own goroutine and lets it block.
func acquireAsync(ctx context.Context, ps *Pools, pool, flow string) <-chan result {
	ch := make(chan result, 1)
	go func() {
		s, err := ps.Acquire(ctx, pool, Request{Tenant: flow, Cost: 1})
		ch <- result{seat: s, err: err}
	}()
	synctest.Wait()
	return ch
}

type result struct {
	seat Seat
	err  error
}

func stats(t *testing.T, ps *Pools, pool string) PoolStats {
	t.Helper()
	st, ok := ps.Stats(pool)
	if !ok {
		t.Fatalf("no pool %q", pool)
	}
	return st
}

// checkDrained fails unless every pool is back to nothing in flight, queued,
// borrowed or lent.
func checkDrained(t *testing.T, ps *Pools) {
	t.Helper()
	for _, name := range ps.Names() {
		st := stats(t, ps, name)
		if st.InFlight != 0 || st.Queued != 0 || st.Borrowed != 0 || st.Lent != 0 {
			t.Errorf("pool %s not drained: %+v", name, st)
		}
	}
	if ps.queued != 0 {
		t.Errorf("queued across pools = %d; want 0", ps.queued)
	}
}

func TestPoolsSeatsFollowShares(t *testing.T) {
	ps := newPools(t, 10, map[string]PoolConfig{
		"gold":   {Share: 3, LendablePercent: 50, BorrowingPercent: 200},
		"silver": {Share: 1},
	})
	for _, tc := range []struct {
		total, gold, silver, goldLend, goldBorrow int
	}{
		{10, 8, 2, 4, 16}, // 7.5 and 2.5: the tie goes to the first by name; 10 seats in all
		{4, 3, 1, 2, 6},
		{0, 1, 1, 1, 2}, // every pool keeps a seat: the total is at least 2
	} {
		ps.SetTotal(tc.total)
		g, s := stats(t, ps, "gold"), stats(t, ps, "silver")
		if g.Seats != tc.gold || s.Seats != tc.silver || g.Lendable != tc.goldLend || g.BorrowLimit != tc.goldBorrow {
			t.Errorf("total %d: gold %+v, silver %+v; want seats %d/%d, gold lendable %d, borrow limit %d",
				tc.total, g, s, tc.gold, tc.silver, tc.goldLend, tc.goldBorrow)
		}
	}
	if _, err := ps.Acquire(context.Background(), "bronze", Request{Tenant: "t", Cost: 1}); !errors.Is(err, ErrUnknownPool) {
		t.Errorf("Acquire on an unknown pool: %v; want ErrUnknownPool", err)
	}
	if _, ok := ps.Stats("bronze"); ok {
		t.Error("Stats of an unknown pool reported ok")
	}
}

func TestPoolsReleaseExactlyOnce(t *testing.T) {
	ps := onePool(t, 1, PoolConfig{Share: 1})
	s := mustAcquire(t, ps, "p", "t")
	copied := s
	s.Release()
	s.Release()
	copied.Release()
	Seat{}.Release()
	if st := stats(t, ps, "p"); st.InFlight != 0 {
		t.Fatalf("InFlight after releases = %d; want 0", st.InFlight)
	}
	// The token is reused by the next seat; the old handles must not
	// release it.
	s2 := mustAcquire(t, ps, "p", "t")
	s.Release()
	copied.Release()
	if st := stats(t, ps, "p"); st.InFlight != 1 {
		t.Fatalf("stale Release freed a newer seat: InFlight = %d; want 1", st.InFlight)
	}
	if _, err := ps.Acquire(context.Background(), "p", Request{Tenant: "t", Cost: 1}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Acquire with no seat and no queue: %v; want ErrQueueFull", err)
	}
	s2.Release()
	checkDrained(t, ps)
}

func TestPoolsWaitTimeoutAndDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps := onePool(t, 1, PoolConfig{Share: 1, QueueLength: 4, MaxWait: time.Second})
		held := mustAcquire(t, ps, "p", "t")

		start := time.Now()
		_, err := ps.Acquire(context.Background(), "p", Request{Tenant: "t", Cost: 1})
		if !errors.Is(err, ErrWaitTimeout) || time.Since(start) != time.Second {
			t.Fatalf("queued Acquire: %v after %v; want ErrWaitTimeout after max_wait 1s", err, time.Since(start))
		}

		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start = time.Now()
		_, err = ps.Acquire(ctx, "p", Request{Tenant: "t", Cost: 1})
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 300*time.Millisecond {
			t.Fatalf("queued Acquire: %v after %v; want the context's deadline at 300ms", err, time.Since(start))
		}
		if _, err := ps.Acquire(ctx, "p", Request{Tenant: "t", Cost: 1}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire with a done context: %v; want its error", err)
		}
		held.Release()
		checkDrained(t, ps)
	})
}

// twoQueued holds the only seat of a new pool and queues two requests
// behind it, the first with a context that cancel cancels.
func twoQueued(t *testing.T) (ps *Pools, held Seat, cancel func(), first, second <-chan result) {
	t.Helper()
	ps = onePool(t, 1, PoolConfig{Share: 1, QueueLength: 4, MaxWait: time.Minute})
	held = mustAcquire(t, ps, "p", "a")
	ctx, cancel := context.WithCancel(t.Context())
	first = acquireAsync(ctx, ps, "p", "b")
	second = acquireAsync(context.Background(), ps, "p", "c")
	return ps, held, cancel, first, second
}

func TestPoolsCancelWhileQueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, held, cancel, queued, next := twoQueued(t)
		if st := stats(t, ps, "p"); st.Queued != 2 {
			t.Fatalf("Queued = %d; want 2", st.Queued)
		}
		cancel()
		if r := <-queued; !errors.Is(r.err, context.Canceled) {
			t.Fatalf("cancelled Acquire: %v; want context.Canceled", r.err)
		}
		if st := stats(t, ps, "p"); st.Queued != 1 || st.InFlight != 1 {
			t.Fatalf("after cancel: %+v; want 1 queued, 1 in flight", st)
		}
		time.Sleep(time.Second)
		held.Release()
		r := <-next
		if r.err != nil || r.seat.Waited() != time.Second {
			t.Fatalf("next in line: %v, waited %v; want a seat after 1s", r.err, r.seat.Waited())
		}
		r.seat.Release()
		checkDrained(t, ps)
	})
}

// The seat is handed over at the moment the caller gives up: the request
// is not served and the seat goes to the next in line.
func TestPoolsCancelRacingGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, held, cancel, first, second := twoQueued(t)
		held.Release() // grants first ...
		cancel()       // ... which gives up before it runs
		if r := <-first; !errors.Is(r.err, context.Canceled) || r.seat != (Seat{}) {
			t.Fatalf("cancelled Acquire: %+v; want context.Canceled and no seat", r)
		}
		r := <-second
		if r.err != nil {
			t.Fatalf("second in line: %v", r.err)
		}
		r.seat.Release()
		checkDrained(t, ps)
	})
}

// A full queue refuses a flow that already holds its share of it, and takes
// a request of a shorter flow by pushing out the longest flow's newest.
func TestPoolsQueueFullPushesOutLongestFlow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps := onePool(t, 1, PoolConfig{Share: 1, QueueLength: 3, MaxWait: time.Minute})
		held := mustAcquire(t, ps, "p", "heavy")
		var heavy []<-chan result
		for range 3 {
			heavy = append(heavy, acquireAsync(context.Background(), ps, "p", "heavy"))
		}
		if _, err := ps.Acquire(context.Background(), "p", Request{Tenant: "heavy", Cost: 1}); !errors.Is(err, ErrQueueFull) {
			t.Fatalf("heavy over a full queue: %v; want ErrQueueFull", err)
		}
		light := acquireAsync(context.Background(), ps, "p", "light")
		if r := <-heavy[2]; !errors.Is(r.err, ErrQueueFull) {
			t.Fatalf("heavy's newest: %v; want pushed out with ErrQueueFull", r.err)
		}
		held.Release()
		r := <-heavy[0]
		r.seat.Release()
		if r := <-light; r.err != nil {
			t.Fatalf("light: %v; want served second, in round robin", r.err)
		} else {
			r.seat.Release()
		}
		r = <-heavy[1]
		r.seat.Release()
		checkDrained(t, ps)
	})
}

func TestPoolsSetTotalWhileBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps := onePool(t, 4, PoolConfig{Share: 1, QueueLength: 10, MaxWait: time.Minute})
		var seats []Seat
		for range 4 {
			seats = append(seats, mustAcquire(t, ps, "p", "t"))
		}
		ps.SetTotal(2)
		if st := stats(t, ps, "p"); st.Seats != 2 || st.InFlight != 4 {
			t.Fatalf("after SetTotal(2): %+v; want 2 seats and the 4 admitted kept", st)
		}
		waiting := acquireAsync(context.Background(), ps, "p", "t")
		seats[0].Release()
		seats[1].Release()
		if st := stats(t, ps, "p"); st.InFlight != 2 || st.Queued != 1 {
			t.Fatalf("draining to the new total: %+v; want 2 in flight, 1 still queued", st)
		}
		seats[2].Release()
		r := <-waiting
		if r.err != nil {
			t.Fatalf("queued request once under the new total: %v", r.err)
		}
		seats = append(seats[3:], r.seat)

		more := []<-chan result{acquireAsync(context.Background(), ps, "p", "t"), acquireAsync(context.Background(), ps, "p", "t")}
		ps.SetTotal(4) // two more seats: both queued requests take them at once
		for _, ch := range more {
			r := <-ch
			if r.err != nil || r.seat.Waited() != 0 {
				t.Fatalf("after SetTotal(4): %v, waited %v; want a seat at once", r.err, r.seat.Waited())
			}
			seats = append(seats, r.seat)
		}
		if st := stats(t, ps, "p"); st.InFlight != 4 || st.Queued != 0 || ps.Total() != 4 {
			t.Fatalf("after SetTotal(4): %+v", st)
		}
		for _, s := range seats {
			s.Release()
		}
		checkDrained(t, ps)
	})
}

func TestPoolsRetryAfterHint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps := onePool(t, 2, PoolConfig{Share: 1, QueueLength: 10, MaxWait: 3 * time.Second})
		if st := stats(t, ps, "p"); st.RetryAfter != 3*time.Second {
			t.Fatalf("RetryAfter before any seat was held = %v; want max_wait 3s", st.RetryAfter)
		}
		s := mustAcquire(t, ps, "p", "t")
		time.Sleep(time.Second)
		s.Release()
		a, b := mustAcquire(t, ps, "p", "t"), mustAcquire(t, ps, "p", "t")
		q := acquireAsync(context.Background(), ps, "p", "t")
		// 1 queued + 1, each seat held ~1s, 2 seats: about 1s.
		if st := stats(t, ps, "p"); st.MeanHold != time.Second || st.RetryAfter != time.Second {
			t.Fatalf("stats %+v; want MeanHold 1s, RetryAfter 1s", st)
		}
		a.Release()
		r := <-q
		r.seat.Release()
		b.Release()
		checkDrained(t, ps)
	})
}

func TestDrain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ps, err := NewPools(Config{Total: 1, Pools: map[string]PoolConfig{"a": {Share: 1, QueueLength: 4, MaxWait: time.Minute}}})
		if err != nil {
			t.Fatal(err)
		}
		held, err := ps.Acquire(context.Background(), "a", Request{Tenant: "t1", Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 2)
		for range 2 {
			go func() {
				_, err := ps.Acquire(context.Background(), "a", Request{Tenant: "t2", Cost: 1})
				errs <- err
			}()
		}
		synctest.Wait()
		if st, _ := ps.Stats("a"); st.Queued != 2 {
			t.Fatalf("queued %d, want 2", st.Queued)
		}
		ps.Drain()
		for range 2 {
			if err := <-errs; !errors.Is(err, ErrDraining) {
				t.Fatalf("queued request after Drain: %v, want ErrDraining", err)
			}
		}
		if _, err := ps.Acquire(context.Background(), "a", Request{Tenant: "t3", Cost: 1}); !errors.Is(err, ErrDraining) {
			t.Fatalf("new request with no free seat after Drain: %v", err)
		}
		held.Release()
		s, err := ps.Acquire(context.Background(), "a", Request{Tenant: "t3", Cost: 1})
		if err != nil {
			t.Fatalf("a free seat after Drain: %v", err)
		}
		s.Release()
		if st, _ := ps.Stats("a"); st.Queued != 0 || st.InFlight != 0 {
			t.Fatalf("gauges after drain: %+v", st)
		}
	})
}

// TestPoolsSeatsAddUpToTotal: the pools never hold more seats than the
// total (the upstream's capacity), whatever the shares, down to one seat a
// pool.
func TestPoolsSeatsAddUpToTotal(t *testing.T) {
	for _, shares := range [][]int{{50, 30, 20}, {1, 1, 1}, {3, 1}, {97, 2, 1}, {1}} {
		pools := map[string]PoolConfig{}
		for i, sh := range shares {
			pools[string(rune('a'+i))] = PoolConfig{Share: sh}
		}
		ps := newPools(t, 1, pools)
		for total := 0; total <= 64; total++ {
			ps.SetTotal(total)
			sum := 0
			for _, name := range ps.Names() {
				st := stats(t, ps, name)
				if st.Seats < 1 {
					t.Fatalf("shares %v total %d: pool %s has %d seats", shares, total, name, st.Seats)
				}
				sum += st.Seats
			}
			if want := max(total, len(shares)); sum != want {
				t.Fatalf("shares %v total %d: seats add up to %d, want %d", shares, total, sum, want)
			}
		}
	}
}
