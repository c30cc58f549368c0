package bulkhead

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/fairgate/fairgate/internal/fairshare"
)

// maxFreeTokens bounds the seat tokens Pools keeps for reuse.
const maxFreeTokens = 1024

// Pools divides a total concurrency among named pools, each with its seats,
// its bounded fair queue and its lending and borrowing limits, in the manner
// of Kubernetes API Priority and Fairness.
//
// Pools is safe for concurrent use. Create it with [NewPools].
type Pools struct {
	byName map[string]*pool // fixed at construction
	order  []*pool          // by name; fixed at construction

	rules rule // the rule stack (rules.go); allRules but in negative controls

	onShort func() // OnShort's; fixed at construction

	// epoch is the origin of the monotonic instants (ns) the pools'
	// usage averages are kept at.
	epoch time.Time

	mu       sync.Mutex
	draining bool // set by Drain: nothing queues any more
	total    int
	queued   int          // requests queued in all pools
	rotor    int          // the pool that borrows first in the next dispatch
	free     []*seatToken // tokens of released seats, for reuse
	grants   uint64       // queued requests granted so far: round robin among equals
	// executing counts each tenant's requests holding a seat, in all
	// pools: what a tenant's concurrency cap (Request.Cap) limits.
	executing map[string]int
	// holds is each request cost's mean hold of a seat; shortestHold the
	// least of them, shortestCost its cost (long.go).
	holds        []costHold
	shortestHold time.Duration
	shortestCost int
}

// pool is one named pool. Its fields below cfg are guarded by Pools.mu.
type pool struct {
	set  *Pools
	name string
	cfg  PoolConfig

	nominal     int // seats: its share of the total
	lendable    int // of nominal, seats others may borrow while idle
	borrowLimit int // seats it may hold from others
	used        int // of its own seats, those held (by it or borrowers)
	lent        int // of used, those held by other pools' requests
	borrowed    int // seats its requests hold from other pools
	inFlight    int // its requests holding a seat, own or borrowed
	meanHold    time.Duration
	queue       *FairQueue[*waiter]

	// users holds each tenant's use of the pool (requests holding its
	// seats or queued for them) while it has any or its average has not
	// decayed; level is the weighted max-min fair level of the pool's
	// seats among their averages, recomputed at levelAt.
	users   map[string]*poolUser
	level   float64
	levelAt int64
	scratch []fairshare.Demand
	waiting []*poolUser // scratch of grantLocked
}

// poolUser is one tenant's use of a pool. Guarded by Pools.mu.
type poolUser struct {
	id string // the tenant
	// Scratch of grantLocked: whether it has requests queued, the
	// highest priority among its flows' next requests, its use for its
	// weight.
	queued   bool
	top      int
	critical bool      // the request of priority top is critical
	topFlow  string    // the queue's flow whose next request it is
	topClass holdClass // that request's hold class
	longHeld int       // its long requests holding seats (long.go)
	topReady bool      // that request may take a seat (its tenant under its cap)
	granted  uint64    // Pools.grants when a request of it was last granted
	// memo is its use at memoAt, while memoOK: a grant asks it of every
	// tenant once per candidate.
	memo     float64
	memoAt   int64
	memoOK   bool
	ratio    float64
	present  int                 // its requests holding seats or queued
	held     fairshare.Occupancy // its requests holding seats
	arrivals fairshare.Rate      // its requests arriving, per second
	ended    fairshare.Rate      // its requests ending with a seat, per second
	holding  fairshare.Rate      // their seat-seconds, per second
	// refused is the seat-seconds its requests a full queue refused
	// would have held (their class's mean hold), per second
	// (ruleRefusedCount).
	refused fairshare.Rate
	// noQueue: the pool has no queue (ruleRefusedCount).
	noQueue bool
	weight  float64
}

// waiter is a request queued for a seat. Its fields are guarded by Pools.mu.
type waiter struct {
	ready    chan struct{} // receives once, when granted or pushed out
	req      Request
	handle   Handle
	enqueued time.Time
	granted  time.Time // zero until granted
	lender   *pool     // whose seat was granted
	evicted  bool      // pushed out of a full queue
	drained  bool      // sent away by Drain
}

// seatToken makes Release idempotent: a Seat is valid while its gen matches
// the token's, and releasing bumps the token's gen. Guarded by Pools.mu.
type seatToken struct {
	gen      uint64
	acquired time.Time
	class    holdClass // the request's, whose hold it teaches
	long     bool      // counted in its tenant's longHeld
}

// Seat is a granted request's place in a pool. Release it exactly once when
// the request is done; Release on a Seat already released, or on any copy of
// it, does nothing. The zero Seat holds nothing.
//
// Seat is a value, not a pointer, so that acquiring a seat does not
// allocate.
type Seat struct {
	tok    *seatToken
	gen    uint64
	pool   *pool
	lender *pool
	tenant string
	waited time.Duration
}

// PoolStats is a snapshot of one pool, for metrics and Retry-After.
type PoolStats struct {
	Seats       int // nominal seats: the pool's share of the current total
	Lendable    int // of Seats, those other pools may borrow while idle
	BorrowLimit int // seats the pool may borrow from other pools
	InFlight    int // the pool's requests holding a seat, own or borrowed
	Queued      int // the pool's requests waiting for a seat
	Borrowed    int // of InFlight, seats borrowed from other pools
	Lent        int // the pool's seats held by other pools' requests

	// MeanHold is a moving average of how long a seat is held; zero
	// until a seat of the pool has been released.
	MeanHold time.Duration

	// RetryAfter estimates when a request refused now would find a seat:
	// (Queued+1) × MeanHold ÷ Seats, or MaxWait before MeanHold is known.
	// The caller rounds it up to whole seconds for the header.
	RetryAfter time.Duration
}

// NewPools validates cfg and builds its pools.
func NewPools(cfg Config, opts ...Option) (*Pools, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ps := &Pools{byName: make(map[string]*pool, len(cfg.Pools)), rules: allRules, epoch: time.Now(), executing: map[string]int{}}
	for name, pc := range cfg.Pools {
		p := &pool{set: ps, name: name, cfg: pc, queue: NewFairQueue[*waiter](), users: map[string]*poolUser{}, level: math.Inf(1)}
		ps.byName[name] = p
		ps.order = append(ps.order, p)
	}
	for _, opt := range opts {
		opt(ps)
	}
	slices.SortFunc(ps.order, func(a, b *pool) int {
		if a.name < b.name {
			return -1
		}
		if a.name > b.name {
			return 1
		}
		return 0
	})
	ps.mu.Lock()
	ps.setTotalLocked(cfg.Total)
	ps.mu.Unlock()
	return ps, nil
}

// SetTotal changes the total concurrency shared by the pools, as an adaptive
// limit does. Requests holding seats keep them: where a pool now holds more
// than its new seats, it admits no one until enough have drained. Where
// seats were added, queued requests take them at once. n below 1 counts as 1.
func (ps *Pools) SetTotal(n int) {
	ps.mu.Lock()
	ps.setTotalLocked(n)
	ps.dispatchLocked()
	ps.mu.Unlock()
}

// Total reports the total concurrency last set.
func (ps *Pools) Total() int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.total
}

// setTotalLocked shares n seats among the pools by their shares, so that
// the seats add up to exactly the total (largest remainder: each pool gets
// the floor of its share, and the leftover seats go to the largest
// fractions, ties by name). Every pool keeps at least one seat, so the
// total is at least the number of pools. ps.mu must be held.
func (ps *Pools) setTotalLocked(n int) {
	ps.total = max(n, len(ps.order), 1)
	sum := 0
	for _, p := range ps.order {
		sum += p.cfg.Share
	}
	given := 0
	byRemainder := make([]*pool, len(ps.order))
	copy(byRemainder, ps.order)
	for _, p := range ps.order {
		p.nominal = ps.total * p.cfg.Share / sum
		given += p.nominal
	}
	slices.SortStableFunc(byRemainder, func(a, b *pool) int {
		return ps.total*b.cfg.Share%sum - ps.total*a.cfg.Share%sum
	})
	for i := 0; given < ps.total; i++ {
		byRemainder[i%len(byRemainder)].nominal++
		given++
	}
	// A pool left with none takes one from the pool with the most.
	for _, p := range ps.order {
		if p.nominal > 0 {
			continue
		}
		richest := ps.order[0]
		for _, q := range ps.order {
			if q.nominal > richest.nominal {
				richest = q
			}
		}
		richest.nominal--
		p.nominal = 1
	}
	for _, p := range ps.order {
		p.lendable = (p.nominal*p.cfg.LendablePercent + 50) / 100
		p.borrowLimit = (p.nominal*p.cfg.BorrowingPercent + 50) / 100
	}
}

// Names reports the pools' names, sorted.
func (ps *Pools) Names() []string {
	names := make([]string, len(ps.order))
	for i, p := range ps.order {
		names[i] = p.name
	}
	return names
}

// Stats reports a snapshot of the named pool, or false if there is none.
func (ps *Pools) Stats(pool string) (PoolStats, bool) {
	p := ps.byName[pool]
	if p == nil {
		return PoolStats{}, false
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	st := PoolStats{
		Seats:       p.nominal,
		Lendable:    p.lendable,
		BorrowLimit: p.borrowLimit,
		InFlight:    p.inFlight,
		Queued:      p.queue.Len(),
		Borrowed:    p.borrowed,
		Lent:        p.lent,
		MeanHold:    p.meanHold,
		RetryAfter:  p.cfg.MaxWait,
	}
	if p.meanHold > 0 {
		st.RetryAfter = time.Duration(st.Queued+1) * p.meanHold / time.Duration(p.nominal)
	}
	return st, true
}

// Acquire takes a seat in the named pool for r. It takes a free seat at
// once, its pool's own or one borrowed from an idle pool, when the queue is
// empty (or full) and r's tenant is under its cap; otherwise it waits in
// the pool's queue, where flows are served by deficit round robin, until a
// seat is handed to it, the pool's max_wait passes (ErrWaitTimeout) or ctx
// is done (ctx.Err(); the request leaves the queue and never gets a seat).
// A full queue fails at once with ErrQueueFull, unless the request's flow
// has fewer requests queued than the longest flow, whose newest request it
// then pushes out (that one fails with ErrQueueFull): one flow cannot fill
// the queue against the others.
//
// A seat is one request, whatever its cost. Acquiring a free seat does not
// allocate.
func (ps *Pools) Acquire(ctx context.Context, pool string, r Request) (Seat, error) {
	p := ps.byName[pool]
	if p == nil {
		return Seat{}, fmt.Errorf("%w: %q", ErrUnknownPool, pool)
	}
	if err := ctx.Err(); err != nil {
		return Seat{}, err
	}
	if r.Weight <= 0 {
		r.Weight = 1
	}
	now := time.Now()
	ps.mu.Lock()
	if !r.Arrived {
		// Counted whatever becomes of it: a request the full queue
		// refuses was asked for all the same.
		u := ps.userLocked(p, &r)
		u.arrivals.Add(ps.nanos(now), usageTau, 1)
		u.memoOK = false
	}
	if (p.queue.Len() == 0 || p.queue.Len() >= p.cfg.QueueLength && ps.on(ruleFreeSeatBesideFullQueue)) && ps.underCapLocked(&r) {
		// Nobody to wait behind; or no room to wait, and then a free
		// seat r may take is one no queued request may (the dispatch
		// hands those out at once: it is headroom kept for tenants as
		// light as r), so r takes it rather than be refused.
		if lender := ps.lenderForLocked(p, &r, now); lender != nil {
			ps.useLocked(p, &r, +1)
			ps.takeLocked(p, lender, r.Tenant, now)
			s := ps.seatLocked(p, lender, &r, now, 0)
			ps.mu.Unlock()
			return s, nil
		}
	}
	if ps.draining {
		ps.mu.Unlock()
		return Seat{}, ErrDraining
	}
	ps.shortLocked(p, &r)
	if !ps.makeRoomLocked(p, &r, now) {
		if u := p.users[r.Tenant]; u != nil {
			u.refused.Add(ps.nanos(now), usageTau, ps.holdOf(r.holdClass()).Seconds())
			u.memoOK = false
		}
		ps.mu.Unlock()
		return Seat{}, ErrQueueFull
	}
	w := &waiter{ready: make(chan struct{}, 1), req: r, enqueued: now}
	w.handle = p.queue.Push(ps.flowKey(r.flow()), r.Cost, w)
	ps.queued++
	ps.useLocked(p, &r, +1)
	// Seats may be free while every queued request waits for its
	// tenant's cap: this one may take one at once.
	ps.dispatchLocked()
	ps.mu.Unlock()
	return ps.wait(ctx, p, w)
}

// underCapLocked reports whether r's tenant may hold one more seat.
func (ps *Pools) underCapLocked(r *Request) bool {
	return r.Cap <= 0 || ps.executing[r.Tenant] < r.Cap
}

// Executing reports how many requests of tenant hold seats, in all pools.
func (ps *Pools) Executing(tenant string) int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.executing[tenant]
}

// takeLocked counts a seat of lender held by a request of p and tenant.
func (ps *Pools) takeLocked(p, lender *pool, tenant string, now time.Time) {
	ps.heldLocked(p, tenant, now, +1, 0)
	ps.executing[tenant]++
	p.inFlight++
	lender.used++
	if lender != p {
		lender.lent++
		p.borrowed++
	}
}

// releaseLocked returns a seat of lender held by a request of p and tenant
// and hands freed seats to queued requests.
func (ps *Pools) releaseLocked(p, lender *pool, tenant string) {
	if n := ps.executing[tenant]; n > 1 {
		ps.executing[tenant] = n - 1
	} else {
		delete(ps.executing, tenant)
	}
	p.inFlight--
	lender.used--
	if lender != p {
		lender.lent--
		p.borrowed--
	}
	ps.dispatchLocked()
}
