package bulkhead

// Option configures Pools beyond its Config.
type Option func(*Pools)

// OnShort registers fn, called each time a request finds every seat its
// pool may reach taken: its pool's own seats and any another pool may lend
// it, whatever headroom the pools keep, with its tenant under its cap. It
// queues then, or the full queue refuses it. An adaptive limit that the
// pools divide takes this as demand beyond it (shed.Limiter.Press). A
// request that waits beside free seats waits for the headroom kept for
// tenants lighter than it, or for its tenant's cap: a higher limit would
// hand its flood more seats, the headroom would stay as it is, and the
// upstream would hold more of the flood's calls, which is not what the
// lighter tenants need. fn is called with the pools' lock held: it must be
// quick and must not call Pools. Default: none.
func OnShort(fn func()) Option {
	return func(ps *Pools) { ps.onShort = fn }
}

// shortLocked calls onShort if r, which found no seat it may take, would
// find none whatever the headroom (OnShort). ps.mu must be held.
func (ps *Pools) shortLocked(p *pool, r *Request) {
	if ps.onShort != nil && ps.underCapLocked(r) && ps.lenderLocked(p) == nil {
		ps.onShort()
	}
}
