package bulkhead

// rule is one rule of the pools' stack, above the plain bulkhead (seats per
// pool, a bounded queue, borrowing within lendable_percent and
// borrowing_percent). Pools applies every rule; each is a bit so that the
// negative control of its test can switch it off through a test-only
// [Option], and the hot path tests it with one AND. The comments below are
// the rule stack's specification, from the queue's order outwards.
type rule uint32

const (
	// ruleFairQueue: a pool's queue is one flow per tenant, served by
	// deficit round robin, and a seat that frees goes to the queued
	// tenants within their fair share first, the lightest of them first
	// (grantLocked). Off, the queue is first come, first served.
	ruleFairQueue rule = 1 << iota

	// ruleHeaviestOfLongest: a full queue that must push a request out
	// for a tenant within its share pushes out the newest request of the
	// heaviest tenant above its share among the longest flows, not merely
	// the flow that last grew longest (makeRoomLocked).
	ruleHeaviestOfLongest

	// ruleHeadroom: a tenant leaves free the seats the tenants of its
	// pool using less than half as much as it (for their weights) would
	// need for their bursts, U + 2√U of their use U less the seats they
	// hold, never the pool's last seat (lighterNeedLocked). A light
	// tenant's short request then finds a seat free instead of waiting
	// for a heavier tenant's export to end. A critical request takes any
	// free seat.
	ruleHeadroom

	// ruleArrivalSeat: the headroom counts, beyond the seats the lighter
	// tenants hold nearly all the time, one for the request of theirs
	// that arrives (burstNeedAt): a light tenant's request that finds
	// another of its tenant's busy still finds a seat free.
	ruleArrivalSeat

	// ruleRefusedCount: a tenant none of whose requests has ended lately
	// uses at least the seat-seconds a second its refused requests would
	// have held (useOf), and in a pool without a queue its arrival rate
	// times the shortest hold, so that a tenant refused by a full pool
	// without a queue is still light demand the headroom forms for.
	ruleRefusedCount

	// ruleFloor: a tenant using less than heavyUse of a seat for its
	// weight keeps no headroom back for lighter ones, so two light
	// tenants never hold each other off (lighterNeedLocked).
	ruleFloor

	// ruleGlobalHeadroom: with more than one pool, the pools together
	// keep U + 3√U of the use of every pool's tenants lighter than the
	// requesting one, because light tenants borrow from any pool and a
	// small pool's own headroom cannot hold their bursts
	// (globalKeepsLocked).
	ruleGlobalHeadroom

	// ruleLenderKeepsItsOwn: a pool lends another pool's request only the
	// seats beyond the headroom its own lighter tenants need, its last
	// seat included (lenderKeepsLocked); against its own heavier tenants
	// the last seat is never headroom.
	ruleLenderKeepsItsOwn

	// ruleGuarantee: when the pools shrink under tenants holding long
	// requests, a lighter tenant may take a seat beyond its pool's
	// nominal seats, bounded by what the heavier tenants and borrowers
	// hold beyond their due (guaranteedLocked).
	ruleGuarantee

	// ruleLentStaysForLighter: a tenant that owes lighter tenants headroom
	// does not take back its pool's seats lent to other pools, only a
	// tenant that owes none does (guaranteedLocked).
	ruleLentStaysForLighter

	// ruleLightBorrows: a light tenant (below lightUse of a seat for its
	// weight) may borrow beyond its pool's borrowing limit and from a
	// pool whose queue is not empty (lightLocked).
	ruleLightBorrows

	// ruleModestBorrows: a short request of a tenant using less than
	// modestUse of a seat for its weight may borrow from a pool none of
	// whose own requests is in flight or queued (unused) beyond its own
	// pool's borrowing limit (pastLimitLocked), so that a
	// quiet tenant whose pool's seats its heavier neighbour holds (within
	// the headroom's rules) borrows an idle seat instead of waiting.
	ruleModestBorrows
	// ruleLightInPairs: a light tenant stays light with up to lightAtOnce
	// requests in the pool at once, not one (notLightIfBusy).
	ruleLightInPairs

	// ruleBorrowPastHeadroom: a queued request whose own pool's free seat
	// is headroom its tenant may not take borrows another pool's idle
	// seat instead of waiting for its own (dispatchLocked).
	ruleBorrowPastHeadroom

	// ruleLongIsHeavy: a request whose cost holds a seat longLike times
	// as long as the shortest cost's takes no headroom, whatever its
	// tenant's use (longLocked): the headroom is for short requests.
	ruleLongIsHeavy

	// ruleFreeSeatBesideFullQueue: a request that finds its pool's queue
	// full takes a free seat it may take at once rather than be refused
	// (Acquire).
	ruleFreeSeatBesideFullQueue

	// allRules is the stack as Pools applies it.
	allRules = ruleFreeSeatBesideFullQueue<<1 - 1
)

// on reports whether the pools apply rule r. Fixed at construction.
func (ps *Pools) on(r rule) bool { return ps.rules&r != 0 }
