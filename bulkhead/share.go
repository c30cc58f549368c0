package bulkhead

import (
	"math"
	"time"

	"github.com/fairgate/fairgate/internal/fairshare"
)

// UsageWindow is the time constant of a tenant's use of a pool: the seats
// its requests ask for, averaged over about the last second. A tenant that
// holds a seat now and then uses a fraction of one; a flood asks for
// several all the time.
const UsageWindow = time.Second

// usageTau is UsageWindow in seconds.
var usageTau = UsageWindow.Seconds()

// ShareState is one tenant's use of a pool against its fair share of the
// pool's seats.
type ShareState struct {
	// Use is the seats the tenant's requests ask for: the rate at which
	// they arrive at the pool (refused ones too) times how long they hold
	// a seat, or the seats they held, if more — each averaged over about
	// UsageWindow; until one of its requests has ended (lately), its
	// requests holding or waiting for seats now beyond the first (a flood
	// of long requests is heavy from its first requests, not when the
	// first of them ends; a tenant back after a quiet spell, with one
	// request, is not a flood). Once its
	// requests end, time spent waiting in the queue does not count: a
	// light tenant that other tenants' requests keep waiting is not made
	// heavy by the wait.
	Use float64
	// Share is the tenant's weighted max-min fair share of the pool's
	// seats among the tenants using it; +Inf when their uses add up to no
	// more than the seats.
	Share float64
	// Within reports Use ≤ Share: the tenant is not the reason the pool
	// is short of seats.
	Within bool
	// Hold is how long the request Arrive was told of is expected to hold
	// its seat: its class's mean hold, as the pools have learnt it; zero
	// before they have learnt any. Share leaves it zero.
	Hold time.Duration
}

// Share reports tenant's use of the named pool against its fair share.
// The fair level is recomputed from every tenant's use at most every
// UsageWindow/50. Unknown pools and tenants never seen are within share.
func (ps *Pools) Share(pool, tenant string) ShareState {
	p := ps.byName[pool]
	if p == nil {
		return ShareState{Share: math.Inf(1), Within: true}
	}
	now := ps.nanos(time.Now())
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.shareLevelLocked(p, now)
	u := p.users[tenant]
	if u == nil {
		return ShareState{Share: p.level, Within: true}
	}
	return stateOf(p, u, now)
}

// stateOf is u's ShareState in p at t, by the level last computed.
func stateOf(p *pool, u *poolUser, t int64) ShareState {
	st := ShareState{Use: p.set.useOf(u, t), Share: p.level * u.weight}
	st.Within = st.Use <= st.Share
	return st
}

// Arrive counts a request of r's tenant arriving for the named pool in the
// tenant's use, and reports its use against its fair share as Share does.
// A layer that may refuse requests before they reach the pool (shedding)
// calls it first, so that what it refuses still counts as asked for: a
// tenant whose flood is shed does not look light for it. Acquire the
// request, if at all, with Arrived set, or it is counted twice. Give r its
// Class and Cost for the ShareState's Hold.
func (ps *Pools) Arrive(pool string, r Request) ShareState {
	p := ps.byName[pool]
	if p == nil {
		return ShareState{Share: math.Inf(1), Within: true}
	}
	if r.Weight <= 0 {
		r.Weight = 1
	}
	t := ps.nanos(time.Now())
	ps.mu.Lock()
	defer ps.mu.Unlock()
	u := ps.userLocked(p, &r)
	u.arrivals.Add(t, usageTau, 1)
	u.memoOK = false
	ps.shareLevelLocked(p, t)
	st := stateOf(p, u, t)
	st.Hold = ps.holdOf(r.holdClass())
	return st
}

// shareLevelLocked recomputes p's fair level at now if it is due. ps.mu
// must be held.
func (ps *Pools) shareLevelLocked(p *pool, now int64) {
	if now-p.levelAt >= int64(UsageWindow)/fairshare.LevelEvery || now < p.levelAt {
		ps.recomputeLocked(p, now)
	}
}

// withinLocked reports whether tenant is within its fair share of p at now,
// by the level last computed. ps.mu must be held.
func (ps *Pools) withinLocked(p *pool, tenant string, now time.Time) bool {
	u := p.users[tenant]
	return u == nil || ps.useOf(u, ps.nanos(now)) <= p.level*u.weight
}

// ratioLocked is tenant's use of p for its weight at t: what orders the
// tenants from lightest to heaviest. A tenant p has not seen is the
// lightest of all. ps.mu must be held.
func (ps *Pools) ratioLocked(p *pool, tenant string, t int64) float64 {
	if u := p.users[tenant]; u != nil {
		return ps.useOf(u, t) / u.weight
	}
	return 0
}

// lighter is how much less a tenant must use (for its weight) than another
// to count as lighter than it for the headroom: tenants using about as
// much as each other keep nothing back from each other.
const lighter = 2

// heavyUse is the least use (for its weight) of a tenant that keeps
// headroom back for lighter ones: a tenant using less than a quarter of a
// seat holds one now and then, briefly, and its requests are no flood.
// Among many such tenants, their uses scatter by chance over a range wider
// than lighter, and without the floor each would keep seats back from the
// next.
const heavyUse = 0.25

// lighterNeedLocked is how many free seats the tenants of p using less
// than half as much (for their weights) as a tenant whose use for its
// weight is ratio would need at t, beyond those they hold: for a use of U
// seats, U + 2√U rounded up, as for requests arriving at random (one seat
// for a use of 0.05, three for 0.65), nearly all the time. Without it,
// heavier tenants fill the seats to the last and the next request of a
// lighter one waits for one of theirs to end — a 300 ms export in front of
// a 5 ms read; with it, the lighter tenant's requests find a seat free.
// The seats are kept back even while p's seats cover what its tenants ask
// for on average: a heavy tenant's requests come in bursts too, and a
// burst of exports holds every seat for as long as an export takes.
// ps.mu must be held.
func (ps *Pools) lighterNeedLocked(p *pool, ratio float64, t int64) int {
	ps.shareLevelLocked(p, t)
	if !ps.on(ruleHeadroom) || ratio < heavyUse && ps.on(ruleFloor) {
		return 0
	}
	l := lighterUse(p, ratio, t)
	return max(ps.burstNeed(l)-l.held, 0)
}

// guaranteedLocked reports whether a request of a tenant of p whose use
// for its weight is ratio may take a seat of p at t although p's seats
// are all taken: the seats taken are held by tenants heavier than it, or
// lent to other pools, beyond the headroom they were to leave the lighter
// tenants (lighterNeedLocked's U + 2√U, less what those hold; never the
// pool's last seat). That happens when the pools shrink under them — the
// adaptive limit fell after they took their seats, which their long
// requests then hold for as long as they run — and without it the light
// tenants' reads wait for those to end. The excess over p's seats is
// bounded by what the heavier tenants and the borrowers hold beyond
// their due, and they take no seat of p until it has drained. Heavier
// means using lighter times as much as the tenant, and at least heavyUse;
// lent seats are owed back only to a tenant that owes no headroom itself.
// ps.mu must be held.
func (ps *Pools) guaranteedLocked(p *pool, ratio float64, t int64) bool {
	if !ps.mayOweLocked(p, t) {
		return false
	}
	var l lighterSet
	var w, all float64
	heavier := false
	for _, u := range p.users {
		all += u.weight
		x := ps.useOf(u, t)
		if r := x / u.weight; r >= heavyUse && ratio < r/lighter {
			heavier = heavier || u.held.Level() > 0
			continue
		}
		l.use += x
		l.held += u.held.Level()
		w += u.weight
	}
	if all > 0 {
		l.entitled = float64(p.nominal) * w / all
	}
	if l.held >= min(ps.burstNeed(l), p.nominal-1) {
		return false
	}
	// With no heavier tenant holding a seat, only the seats lent out are
	// owed back, and not the headroom the tenant owes the tenants lighter
	// than itself: a heavy tenant of a pool with seats lent out gets its
	// pool's seats back only beyond that.
	return heavier || p.lent > 0 && (!ps.on(ruleLentStaysForLighter) || ps.lighterNeedLocked(p, ratio, t) == 0)
}

// mayOweLocked reports whether any tenant of p may be owed a seat beyond
// p's seats at t (guaranteedLocked): p's seats are all taken, and p has
// seats lent out or a tenant heavy enough to keep headroom back holds
// one. It spares the queue's dispatch the search for such a tenant in the
// common case. ps.mu must be held.
func (ps *Pools) mayOweLocked(p *pool, t int64) bool {
	switch {
	case !ps.on(ruleHeadroom) || !ps.on(ruleGuarantee) || p.used < p.nominal:
		return false
	case p.lent > 0:
		return true
	}
	for _, u := range p.users {
		if u.held.Level() > 0 && ps.useOf(u, t)/u.weight >= heavyUse {
			return true
		}
	}
	return false
}

// roomLocked reports whether a request of p whose tenant's use for its
// weight is ratio may take a free seat of lender at t: the pools keep
// their headroom together (globalKeepsLocked), the lender keeps its own
// (lenderKeepsLocked) and, when the seat is borrowed, so does p
// (mayBorrowLocked). ps.mu must be held.
func (ps *Pools) roomLocked(p, lender *pool, ratio float64, t int64) bool {
	return ps.globalKeepsLocked(ratio, t) && ps.lenderKeepsLocked(lender, p, ratio, t) &&
		(lender == p || ps.mayBorrowLocked(p, ratio, t, false))
}

// modestRoomLocked is roomLocked for a request of class whose tenant uses
// ratio for its weight, borrowing from lender beyond p's borrowing limit
// (pastLimitLocked). ps.mu must be held.
func (ps *Pools) modestRoomLocked(p, lender *pool, ratio float64, class holdClass, t int64) bool {
	return ps.pastLimitLocked(ratio, ps.longLocked(class)) && ps.globalKeepsLocked(ratio, t) &&
		ps.lenderKeepsLocked(lender, p, ratio, t) && ps.mayBorrowLocked(p, ratio, t, true)
}

// globalKeepsLocked reports whether the pools together have a free seat
// beyond the headroom the tenants of all pools lighter than a tenant whose
// use for its weight is ratio need at t: U + 3√U of their use
// (globalBurstSD), less what they hold, never the last seat.
//
// Each pool's own headroom is not enough when the pools are small and
// their light tenants many (a pool of two seats keeps at most one): the
// light tenants' bursts then outgrow their pool's headroom, while the
// heavy tenants of every pool, each within its own pool's rules, fill the
// rest. Light tenants borrow from any pool (borrowFromLocked), so the
// headroom they need is over all pools, and the heavier tenants leave it
// free between them. Tenants below heavyUse keep none. ps.mu must be held.
func (ps *Pools) globalKeepsLocked(ratio float64, t int64) bool {
	if !ps.on(ruleHeadroom) || !ps.on(ruleGlobalHeadroom) || len(ps.order) == 1 || ratio < heavyUse && ps.on(ruleFloor) {
		return true // with one pool, its own headroom is all there is
	}
	used := 0
	var all lighterSet
	for _, p := range ps.order {
		l := lighterUse(p, ratio, t)
		used, all.use, all.held, all.entitled = used+p.used, all.use+l.use, all.held+l.held, all.entitled+l.entitled
	}
	return ps.total-used > min(max(ps.burstNeedAt(all, globalBurstSD)-all.held, 0), ps.total-1)
}

// lenderKeepsLocked reports whether l has a free seat, for a request of
// pool p, beyond the headroom l keeps for its own tenants lighter than a
// tenant whose use for its weight is ratio, at t. Against l's own heavier
// tenants its last seat is never headroom (a pool's tenant may always run
// one request); against a borrower it is (ruleLenderKeepsItsOwn): a pool of
// two seats whose one light tenant needs both for its bursts lends
// neither. ps.mu must be held.
func (ps *Pools) lenderKeepsLocked(l, p *pool, ratio float64, t int64) bool {
	most := l.nominal - 1
	if l != p && ps.on(ruleLenderKeepsItsOwn) {
		most = l.nominal
	}
	return l.nominal-l.used > min(ps.lighterNeedLocked(l, ratio, t), most)
}

// mayBorrowLocked reports whether a tenant of p whose use for its weight
// is ratio may borrow a seat at t: only beyond the headroom p keeps for its
// lighter tenants of the seats p can reach now — its own free seats and
// those it may still borrow from idle pools. A heavy tenant then does not
// spend its pool's borrowing on seats its lighter neighbours need the
// moment their own are taken. (Seats idle pools could lend come and go
// with those pools' own traffic, so for p's own seats only p's own
// headroom counts: lenderKeepsLocked.) Past p's borrowing limit when past
// (pastLimitLocked). ps.mu must be held.
func (ps *Pools) mayBorrowLocked(p *pool, ratio float64, t int64, past bool) bool {
	light := ps.lightLocked(ratio)
	borrow := ps.lendableToLocked(p, light)
	if !light && !past {
		borrow = min(p.borrowLimit-p.borrowed, borrow)
	}
	free := max(p.nominal-p.used, 0) + borrow
	return free > min(ps.lighterNeedLocked(p, ratio, t), p.nominal+p.borrowed+borrow-1)
}

// lendableToLocked is how many seats idle pools could lend p now, or any
// pools, for a light tenant (borrowFromLocked). ps.mu must be held.
func (ps *Pools) lendableToLocked(p *pool, light bool) int {
	n := 0
	for _, l := range ps.order {
		if l != p && (light || l.queue.Len() == 0) {
			n += max(lendable(l), 0)
		}
	}
	return n
}

// recomputeLocked sets p's fair level at now, and forgets the users with
// nothing held or queued and a use decayed to nothing. The level divides
// the seats among what each tenant asks for now: its use and, on top, its
// requests waiting in the queue — so that a queue makes the level finite
// at once, before the averages have caught up with a flood. A tenant is
// then judged on its use alone, which never counts waiting. ps.mu must be
// held.
func (ps *Pools) recomputeLocked(p *pool, now int64) {
	ds := p.scratch[:0]
	for id, u := range p.users {
		use := ps.useOf(u, now)
		if u.present == 0 && use < 1e-3 {
			delete(p.users, id)
			continue
		}
		ds = append(ds, fairshare.Demand{Use: use + float64(u.present-u.held.Level()), Weight: u.weight})
	}
	p.level = fairshare.Level(float64(p.nominal+p.borrowed), ds)
	p.levelAt = now
	p.scratch = ds[:0]
}

// useOf is u's use of its pool at now (see ShareState.Use). Until one of
// its requests has ended lately, it is also at least the seat-seconds a
// second its refused requests would have held (ruleRefusedCount): a
// tenant whose first requests a pool without a queue refused, while a
// flood that came before it held every seat, is light demand, and the
// headroom must form for it; counted as no use at all it would be refused
// again and again. In a pool without a queue, where no request waits to
// show its tenant's demand, it is also at least its arrival rate times the
// shortest hold the pools know: its first request, arriving while a flood
// holds every seat, is owed one. ps.mu must be held.
func (ps *Pools) useOf(u *poolUser, now int64) float64 {
	if u.memoOK && u.memoAt == now {
		return u.memo
	}
	v := u.held.At(now, usageTau)
	if n := u.ended.At(now, usageTau); n < 1e-3 {
		v = max(v, float64(u.present-1))
		if ps.on(ruleRefusedCount) {
			v = max(v, u.refused.At(now, usageTau))
			if u.noQueue {
				v = max(v, u.arrivals.At(now, usageTau)*ps.shortestHold.Seconds())
			}
		}
	} else {
		v = max(u.arrivals.At(now, usageTau)*u.holding.At(now, usageTau)/n, v)
	}
	if u.longHeld > 0 {
		// A long request holding a seat is no light use, whatever the
		// averages say yet (long.go).
		v = max(v, heavyUse*u.weight)
	}
	u.memo, u.memoAt, u.memoOK = v, now, true
	return v
}

// useLocked counts r's tenant's request entering p, to hold a seat or wait
// for one (delta +1), or leaving it without having held a seat (-1).
// ps.mu must be held.
func (ps *Pools) useLocked(p *pool, r *Request, delta int) {
	u := ps.userLocked(p, r)
	u.present += delta
	u.memoOK = false
}

// userLocked returns r's tenant's entry in p, made if need be. ps.mu must
// be held.
func (ps *Pools) userLocked(p *pool, r *Request) *poolUser {
	u := p.users[r.Tenant]
	if u == nil {
		u = &poolUser{id: r.Tenant, noQueue: p.cfg.QueueLength == 0}
		p.users[r.Tenant] = u
	}
	u.weight = r.Weight
	return u
}

// heldLocked counts a seat of p taken (delta +1) or given back (-1) by a
// request of tenant at now; a seat given back after hold also teaches the
// tenant's mean hold. ps.mu must be held.
func (ps *Pools) heldLocked(p *pool, tenant string, now time.Time, delta int, hold time.Duration) {
	u := p.users[tenant]
	if u == nil {
		return
	}
	u.held.Set(ps.nanos(now), usageTau, u.held.Level()+delta)
	u.memoOK = false
	if delta < 0 {
		u.present--
		if hold > 0 { // not a seat granted as its caller gave up
			t := ps.nanos(now)
			u.ended.Add(t, usageTau, 1)
			u.holding.Add(t, usageTau, hold.Seconds())
		}
	}
}

// nanos is t as monotonic nanoseconds since the pools were built.
func (ps *Pools) nanos(t time.Time) int64 { return int64(t.Sub(ps.epoch)) }
