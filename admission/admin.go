package admission

import (
	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/bulkhead"
)

// TenantState is one tenant's state, for the admin view a support engineer
// reads when a tenant says it is being throttled.
type TenantState struct {
	ID   string  `json:"id"`
	Tier string  `json:"tier"`
	Rate float64 `json:"rate"`
	// Burst and Tokens describe the tenant's own bucket; Tokens is omitted
	// when the store cannot say without changing it.
	Burst         float64  `json:"burst"`
	Tokens        *float64 `json:"tokens,omitempty"`
	MaxConcurrent int      `json:"max_concurrent"`
	// InFlight is the tenant's requests executing upstream (holding a
	// seat, when there are pools) on this instance.
	InFlight int `json:"in_flight"`
	// Pool is the tenant's bulkhead pool and its state, when pools are
	// configured.
	Pool      string              `json:"pool,omitempty"`
	PoolStats *bulkhead.PoolStats `json:"pool_stats,omitempty"`
}

// TenantState returns the state of the tenant with the given ID.
func (g *Gate) TenantState(id string) (TenantState, bool) {
	t, ok := g.cfg.Load().reg.ByID(id)
	if !ok {
		return TenantState{}, false
	}
	st := TenantState{ID: t.ID, Tier: t.Tier, Rate: t.Rate, Burst: t.Burst, MaxConcurrent: t.MaxConcurrent,
		InFlight: g.caps.InFlight(t.ID)}
	if g.pools != nil {
		st.InFlight = g.pools.Executing(t.ID)
		if ps, ok := g.pools.Stats(t.Pool); ok {
			st.Pool, st.PoolStats = t.Pool, &ps
		}
	}
	if p, ok := g.store.(interface {
		Tokens(ratelimit.BucketKey, ratelimit.Limit) float64
	}); ok {
		tok := p.Tokens(ratelimit.BucketKey{Tenant: t.ID}, ratelimit.Limit{Rate: t.Rate, Burst: t.Burst})
		st.Tokens = &tok
	}
	return st, true
}
