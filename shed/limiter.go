package shed

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
)

const (
	// cutFactor is the factor by which a slow call cuts the ceiling.
	cutFactor = 0.9
	// maxLimitFactor is failsafe-go's default: the gradient's limit stays
	// within 5 times the calls in flight.
	maxLimitFactor = 5
)

// Limiter is an adaptive limit on the total number of concurrent upstream
// calls. See the package doc for how it learns and how it is guarded.
//
// A Limiter is safe for concurrent use. Build one with [NewLimiter].
type Limiter struct {
	inner      adaptivelimiter.AdaptiveLimiter[any]
	maxLatency time.Duration
	min, max   float64
	onChange   func(limit int)

	inflight   atomic.Int64
	innerLimit atomic.Int64 // inner.Limit(), refreshed after every release
	ceilingInt atomic.Int64 // int(ceiling), read on the acquire path

	mu      sync.Mutex
	ceiling float64   // cap set by slow calls; guarded by mu
	lastCut time.Time // when the ceiling was last cut; guarded by mu

	notifyMu sync.Mutex
	reported atomic.Int64 // the limit last given to onChange; written under notifyMu
}

// LimiterOption configures a Limiter beyond its AdaptiveConfig.
type LimiterOption func(*Limiter)

// OnLimitChange registers fn to be called with the new limit each time the
// limit changes (to resize the bulkhead pools, for example). fn is called on
// the goroutine that released the permit which changed the limit, one call
// at a time and in order; it must not block and must not acquire or release
// permits. Default: none.
func OnLimitChange(fn func(limit int)) LimiterOption {
	return func(l *Limiter) { l.onChange = fn }
}

// NewLimiter returns a Limiter configured by cfg, or an error wrapping
// [ErrInvalidConfig] if cfg is invalid (nothing is built then).
func NewLimiter(cfg AdaptiveConfig, opts ...LimiterOption) (*Limiter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	l := &Limiter{
		maxLatency: cfg.MaxLatency,
		min:        float64(cfg.Min),
		max:        float64(cfg.Max),
		ceiling:    float64(cfg.Max),
	}
	for _, opt := range opts {
		opt(l)
	}
	l.inner = adaptivelimiter.NewBuilder[any]().
		WithLimits(uint(cfg.Min), uint(cfg.Max), uint(cfg.Initial)).
		// Keep the gradient under the ceiling too, so that it does not
		// climb on the fast calls alone while slow ones hold it down.
		WithMaxLimitFunc(func(inflight int) float64 {
			return min(maxLimitFactor*float64(inflight), float64(l.ceilingInt.Load()))
		}).
		Build()
	l.innerLimit.Store(int64(cfg.Initial))
	l.ceilingInt.Store(int64(cfg.Max))
	l.reported.Store(int64(cfg.Initial))
	return l, nil
}

// TryAcquire returns a permit for one upstream call and true, or the zero
// Permit and false at once if the limit is reached. It never blocks. The
// caller must release an acquired permit with Record or Drop.
func (l *Limiter) TryAcquire() (Permit, bool) {
	if l.inflight.Add(1) > int64(l.Limit()) {
		l.inflight.Add(-1)
		return Permit{}, false
	}
	ip, ok := l.inner.TryAcquirePermit()
	if !ok {
		l.inflight.Add(-1)
		return Permit{}, false
	}
	return Permit{&permit{l: l, inner: ip, start: time.Now()}}, true
}

// Limit returns the current limit, in concurrent calls: the gradient's
// limit, capped by the ceiling that slow calls cut. It is always within
// [Min, Max].
func (l *Limiter) Limit() int {
	return int(min(l.innerLimit.Load(), l.ceilingInt.Load()))
}

// Inflight returns the number of permits acquired and not yet released.
func (l *Limiter) Inflight() int {
	return int(l.inflight.Load())
}

// release returns p's slot. learn says whether the call's latency may be
// learnt (Record) or not (Drop); a call slower than MaxLatency is never
// learnt and cuts the ceiling either way.
func (l *Limiter) release(p *permit, learn bool) {
	now := time.Now()
	slow := now.Sub(p.start) > l.maxLatency
	if learn && !slow {
		p.inner.Record()
		l.grow()
	} else {
		p.inner.Drop()
		if slow {
			l.cut(now)
		}
	}
	l.inflight.Add(-1)
	l.innerLimit.Store(int64(l.inner.Limit()))
	l.notify()
}

// grow raises the ceiling by about one per ceiling's worth of healthy
// calls (additive increase), up to Max.
func (l *Limiter) grow() {
	if float64(l.ceilingInt.Load()) >= l.max {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ceiling = min(l.max, l.ceiling+1/l.ceiling)
	l.ceilingInt.Store(int64(l.ceiling))
}

// cut lowers the ceiling below the current limit by cutFactor
// (multiplicative decrease, at least 1), at most once per MaxLatency so that
// the calls already in flight under the old limit count once, down to Min.
func (l *Limiter) cut(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.lastCut.IsZero() && now.Sub(l.lastCut) < l.maxLatency {
		return
	}
	l.lastCut = now
	base := min(l.ceiling, float64(l.innerLimit.Load()))
	l.ceiling = max(l.min, math.Floor(min(base*cutFactor, base-1)))
	l.ceilingInt.Store(int64(l.ceiling))
}

// notify calls onChange if the limit differs from the one last reported.
func (l *Limiter) notify() {
	if int64(l.Limit()) == l.reported.Load() {
		return
	}
	l.notifyMu.Lock()
	defer l.notifyMu.Unlock()
	limit := l.Limit()
	if int64(limit) == l.reported.Load() {
		return
	}
	l.reported.Store(int64(limit))
	if l.onChange != nil {
		l.onChange(limit)
	}
}

// Permit is the right to make one upstream call, from [Limiter.TryAcquire].
// Release it exactly once, with Record or Drop; later calls on it, or on a
// copy of it, do nothing. The zero Permit is valid and releases nothing.
//
// Permit is a small value, not a pointer, so that a failed TryAcquire
// allocates nothing.
type Permit struct {
	p *permit
}

type permit struct {
	l        *Limiter
	inner    adaptivelimiter.Permit
	start    time.Time
	released atomic.Bool
}

// Record releases the permit and lets the limit learn from the call's
// latency: use it when the upstream answered (whatever the status). A call
// slower than MaxLatency is not learnt; it lowers the limit.
func (p Permit) Record() {
	if p.p != nil && p.p.released.CompareAndSwap(false, true) {
		p.p.l.release(p.p, true)
	}
}

// Drop releases the permit without learning from the call's latency: use it
// when the call says nothing about the upstream's capacity (the client went
// away, the request was cancelled before the upstream answered). A permit
// held longer than MaxLatency still lowers the limit, so that steady
// timeouts cannot let it creep up.
func (p Permit) Drop() {
	if p.p != nil && p.p.released.CompareAndSwap(false, true) {
		p.p.l.release(p.p, false)
	}
}
