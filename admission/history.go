package admission

import (
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// HistoryResolution is the time between two samples of the console's
// history, HistorySamples how many samples each series keeps: 15 minutes.
const (
	HistoryResolution = 10 * time.Second
	HistorySamples    = 90
)

// History is a short history of every configured tenant and bulkhead pool,
// for the console's sparklines: a ring of the last HistorySamples samples
// of each. Whoever owns it calls Sample every HistoryResolution (the
// gateway's server does, from New to Close). It adds nothing to the request
// path: a sample reads what the gate keeps anyway, the gauges at the
// instant, the one-second slots of the last minute's rejections and queue
// waits over the whole seconds since the previous sample, and the admitted
// requests as the difference of Options.Metrics' decision counters between
// two samples.
//
// Each tenant's ring is allocated once, when the tenant first appears, and
// holds HistorySamples fixed-size samples (about 1.5 KiB); each pool's
// likewise (about 2.1 KiB): memory is bounded by the configured tenants
// and pools. A tenant that a reload removed is dropped at the next sample;
// one that a reload added starts empty there (that sample sets the
// baseline its counts are differences from) and gets its first sample at
// the one after. Pools change only on restart.
//
// A History is safe for concurrent use.
type History struct {
	g *Gate
	// withAdmitted: the gate has Options.Metrics, so admitted requests
	// are counted.
	withAdmitted bool

	mu sync.Mutex
	// from is the instant of the previous sample (of NewHistory before
	// the first): the next one counts from its whole second.
	from    time.Time
	last    time.Time // the latest sample; zero before the first
	gen     uint64    // steps taken; marks the tenants and pools the latest saw
	tenants map[string]*tenantHistory
	pools   map[string]*poolHistory
	// admitted and counters are scratch, reused by every sample: the
	// admitted totals by tenant and the counters they are read from.
	admitted map[string]uint64
	counters []tenantCounter
}

// ring is the last HistorySamples values, in an array: pushing one never
// allocates. The zero value is an empty ring.
type ring[T any] struct {
	s    [HistorySamples]T
	next int // index of the next write
	n    int // values held, up to HistorySamples
}

func (r *ring[T]) push(v T) {
	r.s[r.next] = v
	r.next = (r.next + 1) % HistorySamples
	r.n = min(r.n+1, HistorySamples)
}

// each calls f with every value held, oldest first.
func (r *ring[T]) each(f func(*T)) {
	for i := r.n; i > 0; i-- {
		f(&r.s[(r.next-i+HistorySamples)%HistorySamples])
	}
}

// tenantSample is one sample of a tenant: counts are of the interval that
// ends at the sample, saturated at MaxUint32.
type tenantSample struct {
	admitted, rejected, overload uint32
	inFlight                     uint32
}

type tenantHistory struct {
	ring[tenantSample]
	admitted uint64 // the tenant's admitted total at the previous sample
	seen     uint64 // the History's gen when a step last saw the tenant
}

// poolSample is one sample of a pool, as tenantSample.
type poolSample struct {
	inFlight, seats, queued, admitted uint32
	meanWaitMs                        float32
	shedThreshold                     int32
}

type poolHistory struct {
	ring[poolSample]
	seen uint64
}

// NewHistory returns an empty history of g's tenants and pools, whose
// first Sample counts from now.
func NewHistory(g *Gate, now time.Time) *History {
	h := &History{g: g, withAdmitted: g.metrics != nil, from: now,
		tenants: make(map[string]*tenantHistory), pools: make(map[string]*poolHistory), admitted: make(map[string]uint64)}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stepLocked(now) // every tenant and pool is new: baselines only
	return h
}

// Sample takes one sample of every tenant and pool at now: the interval's
// counts since the previous sample (the whole seconds from its second to
// now's, at most the last 59), the gauges at now.
func (h *History) Sample(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stepLocked(now)
	h.last = now
}

// stepLocked pushes a sample onto the ring of every tenant and pool it
// has seen before, makes an empty one for each new one and drops those no
// longer configured. h.mu is held.
func (h *History) stepLocked(now time.Time) {
	g := h.g
	from, to := h.from.Unix(), now.Unix()
	from = max(from, to-(windowSlots-1)) // the seconds the slots still hold
	h.from = now
	h.gen++
	if h.withAdmitted {
		g.admittedTotals(h.admitted, &h.counters)
	}
	for _, t := range g.cfg.Load().reg.Tenants() {
		th := h.tenants[t.ID]
		if th == nil {
			h.tenants[t.ID] = &tenantHistory{admitted: h.admitted[t.ID], seen: h.gen}
			continue
		}
		th.seen = h.gen
		c := g.rejections.between(t.ID, from, to) // by layer
		rejected := int64(0)
		for _, n := range c {
			rejected += n
		}
		s := tenantSample{rejected: sat32(rejected), overload: sat32(c[LayerShed] + c[LayerBulkhead] + c[LayerAdaptive]),
			inFlight: sat32(int64(g.tenantInFlight(t.ID)))}
		total := h.admitted[t.ID]
		d := total - th.admitted
		if total < th.admitted { // the counters started again
			d = total
		}
		s.admitted, th.admitted = uint32(min(d, math.MaxUint32)), total
		th.push(s)
	}
	maps.DeleteFunc(h.tenants, func(_ string, th *tenantHistory) bool { return th.seen != h.gen })
	if g.pools == nil {
		return
	}
	for _, name := range g.pools.Names() {
		ph := h.pools[name]
		if ph == nil {
			h.pools[name] = &poolHistory{seen: h.gen}
			continue
		}
		ph.seen = h.gen
		st, _ := g.poolState(name, now)
		s := poolSample{inFlight: sat32(int64(st.InFlight)), seats: sat32(int64(st.Seats)), queued: sat32(int64(st.Queued)),
			shedThreshold: int32(st.ShedThreshold)}
		w := g.waits.between(name, from, to)
		if n := w[waitCount]; n > 0 {
			s.admitted, s.meanWaitMs = sat32(n), float32(millis(time.Duration(w[waitSumNanos]/n)))
		}
		ph.push(s)
	}
	maps.DeleteFunc(h.pools, func(_ string, ph *poolHistory) bool { return ph.seen != h.gen })
}

// between returns key's counters summed over the whole seconds [from, to)
// (Unix seconds), which the caller keeps within the last minute; zero when
// nothing was recorded for key.
func (cs *counterSet) between(key string, from, to int64) (c [counterKinds]int64) {
	v, ok := cs.m.Load(key)
	if !ok {
		return c
	}
	m := v.(*minuteCounters)
	for i := range m.slots {
		s := &m.slots[i]
		if sec := s.sec.Load(); sec >= from && sec < to {
			for k := range s.n {
				c[k] += s.n[k].Load()
			}
		}
	}
	return c
}

// sat32 is n clamped to [0, MaxUint32].
func sat32(n int64) uint32 { return uint32(min(max(n, 0), math.MaxUint32)) }

// HistoryView is the history of every tenant and pool (GET /admin/history).
type HistoryView struct {
	// ResolutionSeconds is the time between two samples, Samples the most
	// a series holds.
	ResolutionSeconds int `json:"resolution_seconds"`
	Samples           int `json:"samples"`
	// Last is the latest sample's instant; omitted before the first.
	Last *time.Time `json:"last,omitempty"`
	// Tenants, by ID, and Pools, by name; empty without pools.
	Tenants []TenantHistory `json:"tenants"`
	Pools   []PoolHistory   `json:"pools"`
}

// TenantHistory is one tenant's series, oldest first, all of one length
// (zero until its first sample). A count is of the interval that ends at
// its sample; a gauge is its value at the sample.
type TenantHistory struct {
	ID string `json:"id"`
	// Last is the instant of the newest sample; omitted when none.
	Last *time.Time `json:"last,omitempty"`
	// Admitted counts the requests admitted (exempt and shadow-admitted
	// ones included). Omitted when the gate has no Options.Metrics, whose
	// decision counters it is read from.
	Admitted []int64 `json:"admitted,omitempty"`
	// Rejected counts the tenant's rejections by every layer; Overload
	// those of them by the shed, bulkhead and adaptive layers (503s:
	// fairgate shielding the upstream). The rest are the tenant's own
	// limits (429s of the rate and concurrency layers; 503s of the global
	// backstop or a failed store) and its malformed requests.
	Rejected []int64 `json:"rejected"`
	Overload []int64 `json:"overload"`
	// InFlight is the tenant's requests executing upstream (a gauge).
	InFlight []int64 `json:"in_flight"`
}

// PoolHistory is one pool's series, as TenantHistory.
type PoolHistory struct {
	Name string     `json:"name"`
	Last *time.Time `json:"last,omitempty"`
	// InFlight, Seats and Queued are gauges, as in PoolState.
	InFlight []int64 `json:"in_flight"`
	Seats    []int64 `json:"seats"`
	Queued   []int64 `json:"queued"`
	// Admitted counts the requests that got a seat, MeanWaitMs is their
	// mean queue wait in milliseconds (0 when none got one).
	Admitted   []int64   `json:"admitted"`
	MeanWaitMs []float64 `json:"mean_wait_ms"`
	// ShedThreshold is the priority below which the pool shed (0: none),
	// a gauge.
	ShedThreshold []int64 `json:"shed_threshold"`
}

// View returns every series, oldest first: every tenant's, or when
// tenant is not empty that tenant's alone, and every pool's.
func (h *History) View(tenant string) HistoryView {
	h.mu.Lock()
	defer h.mu.Unlock()
	v := HistoryView{ResolutionSeconds: int(HistoryResolution / time.Second), Samples: HistorySamples,
		Tenants: make([]TenantHistory, 0, len(h.tenants)), Pools: make([]PoolHistory, 0, len(h.pools))}
	if !h.last.IsZero() {
		last := h.last
		v.Last = &last
	}
	for id, th := range h.tenants {
		if tenant != "" && id != tenant {
			continue
		}
		n := th.n
		t := TenantHistory{ID: id, Rejected: make([]int64, 0, n), Overload: make([]int64, 0, n), InFlight: make([]int64, 0, n)}
		if h.withAdmitted {
			t.Admitted = make([]int64, 0, n)
		}
		if n > 0 {
			t.Last = v.Last // every sample since the tenant appeared has it
		}
		th.each(func(s *tenantSample) {
			if h.withAdmitted {
				t.Admitted = append(t.Admitted, int64(s.admitted))
			}
			t.Rejected = append(t.Rejected, int64(s.rejected))
			t.Overload = append(t.Overload, int64(s.overload))
			t.InFlight = append(t.InFlight, int64(s.inFlight))
		})
		v.Tenants = append(v.Tenants, t)
	}
	for name, ph := range h.pools {
		n := ph.n
		p := PoolHistory{Name: name, InFlight: make([]int64, 0, n), Seats: make([]int64, 0, n), Queued: make([]int64, 0, n),
			Admitted: make([]int64, 0, n), MeanWaitMs: make([]float64, 0, n), ShedThreshold: make([]int64, 0, n)}
		if n > 0 {
			p.Last = v.Last
		}
		ph.each(func(s *poolSample) {
			p.InFlight = append(p.InFlight, int64(s.inFlight))
			p.Seats = append(p.Seats, int64(s.seats))
			p.Queued = append(p.Queued, int64(s.queued))
			p.Admitted = append(p.Admitted, int64(s.admitted))
			p.MeanWaitMs = append(p.MeanWaitMs, round3(float64(s.meanWaitMs)))
			p.ShedThreshold = append(p.ShedThreshold, int64(s.shedThreshold))
		})
		v.Pools = append(v.Pools, p)
	}
	slices.SortFunc(v.Tenants, func(a, b TenantHistory) int { return strings.Compare(a.ID, b.ID) })
	slices.SortFunc(v.Pools, func(a, b PoolHistory) int { return strings.Compare(a.Name, b.Name) })
	return v
}
