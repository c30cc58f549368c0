package bulkhead

// Request is what a pool needs to know of one request.
type Request struct {
	// Tenant is whose request it is: its use of the pool is what fair
	// shares weigh, and its requests holding seats are what Cap bounds.
	Tenant string
	// Flow is the request's flow in the pool's fair queue (a tenant's
	// requests of one criticality). Empty means Tenant.
	Flow string
	// Cost weighs the request in the fair queue; below 1 counts as 1.
	Cost int
	// Class is the request's route, a small number ≥ 1 the caller gives
	// each route: the pools learn how long each class holds a seat, so
	// that a route cheap in tokens but slow upstream counts as long (its
	// requests take no headroom). Zero learns the hold per Cost instead.
	Class int
	// Weight is the tenant's weight in the pool's fair shares. Zero
	// means 1.
	Weight float64
	// Cap is the most requests of Tenant that may hold seats at once, in
	// all pools: a queued request of a tenant at its cap waits, and the
	// queue serves other flows meanwhile. Requests waiting in a queue do
	// not count. Zero means no cap.
	Cap int
	// Priority orders a tenant's queued requests: of its flows, the one
	// whose next request has the highest priority is served first (a
	// tenant's critical reads before its own exports). Tenants are
	// ordered by their use, not by priority.
	Priority int
	// Critical marks a request of the highest criticality: it may take a
	// seat of the headroom that tenants above their fair shares leave
	// for lighter ones (a critical read is short and must not fail
	// because its tenant's exports are heavy).
	Critical bool
	// Arrived reports that the request's arrival was already counted in
	// its tenant's use by [Pools.Arrive].
	Arrived bool
}

// holdClass is what a request's hold of a seat is learnt by: its Class
// when set (key > 0), else its cost (key ≤ 0), and its cost, by which an
// unknown class's hold is estimated.
type holdClass struct{ key, cost int }

func (r *Request) holdClass() holdClass {
	c := max(r.Cost, 1)
	if r.Class > 0 {
		return holdClass{r.Class, c}
	}
	return holdClass{-c, c}
}

func (r *Request) flow() string {
	if r.Flow == "" {
		return r.Tenant
	}
	return r.Flow
}
