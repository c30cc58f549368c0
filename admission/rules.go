package admission

// gateRule is one rule of the shared layers beyond each primitive's own.
// The Gate applies every one; each is a bit so that the negative control of
// its test can switch it off through a test-only constructor
// (newGateWithout). The comments below are their specification.
type gateRule uint8

const (
	// shedByShare: a request of a tenant within its fair share of its
	// pool (bulkhead.Pools.Arrive; without pools, of the adaptive limit)
	// is never shed; only tenants above their shares are. Off, shedding
	// sees priorities alone.
	shedByShare gateRule = 1 << iota

	// shedTogether: while every seat of the total is taken, no pool
	// admits a priority below the band another pool sheds in
	// (updateShedFloor). Off, each pool sheds by its own queue alone.
	shedTogether

	// limitByShare: without pools, the adaptive limit's permits are
	// shared by tenant as one pool's seats are (a pool of the limit's
	// size with no queue, fairLimit): a tenant leaves free the seats the
	// tenants lighter than it need, and a critical request takes any.
	// Off, the limit is first come.
	limitByShare

	allGateRules = limitByShare<<1 - 1
)
