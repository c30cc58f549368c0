package admission

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/bulkhead"
	"github.com/fairgate/fairgate/shed"
	"github.com/fairgate/fairgate/tenant"
)

// TenantState is one tenant's state, for the admin view a support engineer
// reads when a tenant says it is being throttled.
type TenantState struct {
	ID   string `json:"id"`
	Tier string `json:"tier"`
	// Rate is the bucket's refill in tokens a second, Burst its size.
	Rate  float64 `json:"rate"`
	Burst float64 `json:"burst"`
	// Tokens is what the tenant's own bucket holds now; omitted when the
	// store cannot say without changing it (Redis).
	Tokens *float64 `json:"tokens,omitempty"`
	// MaxConcurrent is the tenant's concurrency cap on this instance
	// (max_concurrent divided among the instances); zero means none.
	MaxConcurrent int `json:"max_concurrent"`
	// InFlight is the tenant's requests executing upstream (holding a
	// seat, when there are pools) on this instance.
	InFlight int `json:"in_flight"`
	// RejectionsLastMinute counts the tenant's rejections over the last
	// minute on this instance, by layer (every pipeline layer is present,
	// at zero when it rejected nothing).
	RejectionsLastMinute map[string]int64 `json:"rejections_last_minute"`
	// Pool is the tenant's bulkhead pool, PoolUse its use of it against
	// its fair share, and PoolStats the pool's state; all omitted without
	// pools.
	Pool      string     `json:"pool,omitempty"`
	PoolUse   *ShareView `json:"pool_use,omitempty"`
	PoolStats *PoolState `json:"pool_stats,omitempty"`
}

// ShareView is a tenant's use of a pool against its fair share
// (bulkhead.Pools.Share).
type ShareView struct {
	// Use is the tenant's requests holding or waiting for the pool's
	// seats, averaged.
	Use float64 `json:"use"`
	// Share is the tenant's weighted max-min fair share of the seats;
	// null when the pool's users together fit in it (no one is above
	// share).
	Share *float64 `json:"share"`
	// Within reports Use ≤ Share: shedding never picks the tenant.
	Within bool `json:"within"`
}

// PoolState is one bulkhead pool's state.
type PoolState struct {
	Name string `json:"name"`
	// Seats is the pool's nominal seats (its share of the current total);
	// Lendable of them may be lent while idle, and the pool may borrow
	// up to BorrowLimit.
	Seats       int `json:"seats"`
	Lendable    int `json:"lendable"`
	BorrowLimit int `json:"borrow_limit"`
	// InFlight is the pool's requests holding a seat, Borrowed of them
	// on seats of other pools; Lent is this pool's seats held by others.
	InFlight int `json:"in_flight"`
	Borrowed int `json:"borrowed"`
	Lent     int `json:"lent"`
	// Queued is the requests waiting for a seat, QueueLength the queue's
	// bound.
	Queued      int `json:"queued"`
	QueueLength int `json:"queue_length"`
	// MeanWaitMs is the mean queue wait of the requests admitted in the
	// last minute (Admitted), in milliseconds.
	MeanWaitMs float64 `json:"mean_wait_ms"`
	Admitted   int64   `json:"admitted_last_minute"`
	// MeanHoldMs is a moving average of how long a seat is held.
	MeanHoldMs float64 `json:"mean_hold_ms"`
	// ShedThreshold is the priority below which the pool sheds now (0:
	// nothing is shed); see shed.Priority.
	ShedThreshold int `json:"shed_threshold"`
}

// PoolsState is the state of the shared layers: the pools, the adaptive
// limit and the shed floor.
type PoolsState struct {
	// Pools, by name; empty without a bulkhead.
	Pools []PoolState `json:"pools"`
	// TotalSeats is the seats the pools divide (the adaptive limit when
	// there is one); zero without a bulkhead.
	TotalSeats int `json:"total_seats"`
	// Adaptive is the adaptive limit; null when off.
	Adaptive *AdaptiveState `json:"adaptive"`
	// ShedThreshold is the shedding threshold without pools (the one
	// shedder in front of the adaptive limit); null with pools or without
	// shedding.
	ShedThreshold *int `json:"shed_threshold,omitempty"`
	// ShedFloor is the priority below which every pool sheds while the
	// upstream is the bottleneck (0: none).
	ShedFloor int `json:"shed_floor"`
	// Priorities names the bands of the shed thresholds: the lowest
	// priority of each criticality, for reading a threshold.
	Priorities map[string]int `json:"priorities"`
	// Instances is how many gateway instances this one counts as sharing
	// the store (the live count on Redis; 1 on the embedded store): every
	// tenant's concurrency cap here is ceil(max_concurrent / Instances).
	Instances int `json:"instances"`
}

// AdaptiveState is the adaptive concurrency limit.
type AdaptiveState struct {
	Limit    int `json:"limit"`
	InFlight int `json:"in_flight"`
}

// TenantState returns the state of the tenant with the given ID.
func (g *Gate) TenantState(id string) (TenantState, bool) {
	t, ok := g.cfg.Load().reg.ByID(id)
	if !ok {
		return TenantState{}, false
	}
	return g.tenantState(t, g.now()), true
}

// TenantStates returns every configured tenant's state, by ID.
func (g *Gate) TenantStates() []TenantState {
	reg := g.cfg.Load().reg
	now := g.now()
	ts := reg.Tenants()
	out := make([]TenantState, 0, len(ts))
	for _, t := range ts {
		out = append(out, g.tenantState(t, now))
	}
	slices.SortFunc(out, func(a, b TenantState) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// UnauthenticatedRejections returns the rejections of requests without a
// valid key (missing or unknown keys, key guessing) over the last minute on
// this instance, by layer, as TenantState.RejectionsLastMinute.
func (g *Gate) UnauthenticatedRejections() map[string]int64 {
	return rejectionsByLayer(g.rejections.sums("", g.now()))
}

// rejectionsByLayer names the pipeline layers' counts.
func rejectionsByLayer(sums [counterKinds]int64) map[string]int64 {
	m := make(map[string]int64, int(LayerAdaptive))
	for l := LayerIdentify; l <= LayerAdaptive; l++ {
		m[l.String()] = sums[l]
	}
	return m
}

func (g *Gate) tenantState(t *tenant.Tenant, now time.Time) TenantState {
	st := TenantState{ID: t.ID, Tier: t.Tier, Rate: round3(t.Rate), Burst: round3(t.Burst),
		MaxConcurrent: t.CapFor(false, g.instances()), InFlight: g.tenantInFlight(t.ID),
		RejectionsLastMinute: rejectionsByLayer(g.rejections.sums(t.ID, now))}
	if g.pools != nil {
		if ps, ok := g.poolState(t.Pool, now); ok {
			st.Pool, st.PoolStats = t.Pool, &ps
			sh := g.pools.Share(t.Pool, t.ID)
			v := &ShareView{Use: round3(sh.Use), Within: sh.Within}
			if !math.IsInf(sh.Share, 0) {
				share := round3(sh.Share)
				v.Share = &share
			}
			st.PoolUse = v
		}
	}
	if p, ok := g.store.(interface {
		Tokens(ratelimit.BucketKey, ratelimit.Limit) float64
	}); ok {
		tok := round3(p.Tokens(ratelimit.BucketKey{Tenant: t.ID}, ratelimit.Limit{Rate: t.Rate, Burst: t.Burst}))
		st.Tokens = &tok
	}
	return st
}

// tenantInFlight returns the tenant's requests executing upstream: holding
// a seat when there are pools, else a concurrency slot.
func (g *Gate) tenantInFlight(id string) int {
	if g.pools != nil {
		return g.pools.Executing(id)
	}
	return g.caps.InFlight(id)
}

// tenantCounter is one of Options.Metrics' decision counters, of tenant.
type tenantCounter struct {
	tenant string
	c      prometheus.Counter
}

// admittedTotals sets into to each tenant's requests admitted so far
// (admitted, exempt or admitted by shadow mode) as Options.Metrics'
// decision counters count them; into is left empty without Metrics. buf is
// the caller's scratch, kept for the next call. The counters are read
// outside the metrics' lock, so that a new label set is never held up.
func (g *Gate) admittedTotals(into map[string]uint64, buf *[]tenantCounter) {
	clear(into)
	m := g.metrics
	if m == nil {
		return
	}
	cs := (*buf)[:0]
	m.mu.RLock()
	for k, c := range m.counters {
		if k.tenant != "" && (k.layer == LayerNone || k.shadow) {
			cs = append(cs, tenantCounter{k.tenant, c})
		}
	}
	m.mu.RUnlock()
	var pb dto.Metric
	for _, tc := range cs {
		if tc.c.Write(&pb) == nil {
			into[tc.tenant] += uint64(pb.GetCounter().GetValue())
		}
	}
	clear(cs) // keep no counter of a tenant a reload removed
	*buf = cs[:0]
}

// poolState returns the named pool's state.
func (g *Gate) poolState(name string, now time.Time) (PoolState, bool) {
	ps, ok := g.pools.Stats(name)
	if !ok {
		return PoolState{}, false
	}
	st := PoolState{Name: name, Seats: ps.Seats, Lendable: ps.Lendable, BorrowLimit: ps.BorrowLimit,
		InFlight: ps.InFlight, Borrowed: ps.Borrowed, Lent: ps.Lent, Queued: ps.Queued,
		MeanHoldMs: millis(ps.MeanHold)}
	if p := g.shedders[name]; p != nil {
		st.QueueLength, st.ShedThreshold = p.queueCap, int(p.shedder.Threshold())
	} else if pc, ok := g.layerCfgPool(name); ok {
		st.QueueLength = pc.QueueLength
	}
	w := g.waits.sums(name, now)
	if n := w[waitCount]; n > 0 {
		st.Admitted, st.MeanWaitMs = n, millis(time.Duration(w[waitSumNanos]/n))
	}
	return st, true
}

// layerCfgPool returns the named pool's config.
func (g *Gate) layerCfgPool(name string) (bulkhead.PoolConfig, bool) {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	if g.layerCfg.Bulkhead == nil {
		return bulkhead.PoolConfig{}, false
	}
	pc, ok := g.layerCfg.Bulkhead.Pools[name]
	return pc, ok
}

// PoolsState returns the state of the pools, the adaptive limit and the
// shed thresholds.
func (g *Gate) PoolsState() PoolsState {
	now := g.now()
	st := PoolsState{Pools: []PoolState{}, ShedFloor: int(g.shedFloor.Load()), Priorities: map[string]int{}, Instances: g.instances()}
	for _, c := range []shed.Criticality{shed.Sheddable, shed.Default, shed.Critical} {
		st.Priorities[c.String()] = int(shed.PriorityFor(0, c))
	}
	if g.pools != nil {
		st.TotalSeats = g.pools.Total()
		for _, name := range g.pools.Names() {
			if ps, ok := g.poolState(name, now); ok {
				st.Pools = append(st.Pools, ps)
			}
		}
	} else if p := g.shedders[""]; p != nil {
		thr := int(p.shedder.Threshold())
		st.ShedThreshold = &thr
	}
	if g.limiter != nil {
		st.Adaptive = &AdaptiveState{Limit: g.limiter.Limit(), InFlight: g.limiter.Inflight()}
	}
	return st
}
