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
	pressed    atomic.Bool  // calls wanted more than the limit since the last window (Press)
	innerLimit atomic.Int64 // inner.Limit(), refreshed after every release
	ceilingInt atomic.Int64 // int(ceiling), read on the acquire path

	mu      sync.Mutex
	ceiling float64    // cap set by slow calls and queueing; guarded by mu
	lastCut time.Time  // when a slow call last cut the ceiling; guarded by mu
	sense   queueSense // guarded by mu
	climb   bool       // the window before the last was pressed; guarded by mu
	rules   rule       // the rules it reads latencies by (rules.go); allRules but in negative controls

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
	cfg = cfg.WithDefaults()
	l := &Limiter{
		maxLatency: cfg.MaxLatency,
		min:        float64(cfg.Min),
		max:        float64(cfg.Max),
		ceiling:    float64(cfg.Initial),
		rules:      allRules,
	}
	for _, opt := range opts {
		opt(l)
	}
	// Above its initial value the limit starts as if probing a knee one
	// level above it: slowly, until the calls there are seen not to wait.
	l.sense.knee.probing = cfg.Initial + 1
	l.inner = adaptivelimiter.NewBuilder[any]().
		WithLimits(uint(cfg.Min), uint(cfg.Max), uint(cfg.Initial)).
		// Keep the gradient under the ceiling too, so that it does not
		// climb on the fast calls alone while slow ones hold it down —
		// but not below the initial limit: a ceiling held low by an
		// incident would drag the gradient down with it, and the
		// gradient climbs back one step a second, long after the
		// upstream has.
		WithMaxLimitFunc(func(inflight int) float64 {
			return min(maxLimitFactor*float64(inflight), float64(max(l.ceilingInt.Load(), int64(cfg.Initial))))
		}).
		Build()
	l.innerLimit.Store(int64(cfg.Initial))
	l.ceilingInt.Store(int64(cfg.Initial))
	l.reported.Store(int64(cfg.Initial))
	return l, nil
}

// TryAcquire is TryAcquireClass(0): for callers whose calls all cost
// about the same.
func (l *Limiter) TryAcquire() (Permit, bool) { return l.TryAcquireClass(0) }

// TryAcquireClass returns a permit for one upstream call of class and true,
// or the zero Permit and false at once if the limit is reached. It never
// blocks. The caller must release an acquired permit with Record or Drop.
//
// A class is a kind of call whose latencies are alike — a route: each
// call's latency is judged against its class's typical one, so that the
// mix of cheap and expensive calls is not mistaken for the upstream's
// queue. Classes are 0 to MaxLatencyClasses-1; higher ones share the last.
func (l *Limiter) TryAcquireClass(class int) (Permit, bool) { return l.TryAcquireLeaving(class, 0) }

// TryAcquireLeaving is TryAcquireClass, except that it acquires a permit
// only while keep of the limit's permits stay free after it (never more
// than half the limit): the permits a caller keeps for its more important
// calls. A call refused so presses the limit, as one that found it
// reached does.
func (l *Limiter) TryAcquireLeaving(class, keep int) (Permit, bool) {
	level, limit := l.inflight.Add(1), int64(l.Limit())
	limit -= int64(min(max(keep, 0), int(limit)/2))
	if level >= limit {
		l.Press()
	}
	if level > limit {
		l.inflight.Add(-1)
		return Permit{}, false
	}
	ip, ok := l.inner.TryAcquirePermit()
	if !ok {
		l.inflight.Add(-1)
		l.Press()
		return Permit{}, false
	}
	return Permit{&permit{l: l, inner: ip, start: time.Now(), class: class, level: int(level)}}, true
}

// Press tells the limit that calls wanted more than it allows: a call
// found it reached, or a request found every seat it may reach of the
// pools that divide it taken (bulkhead.OnShort). Only a limit pressed since the last window of calls rises:
// one the calls do not reach would let the next surge build a queue in the
// upstream for as long as it takes to come back down.
func (l *Limiter) Press() {
	if !l.pressed.Load() {
		l.pressed.Store(true)
	}
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
	took := now.Sub(p.start)
	slow := took > l.maxLatency
	if learn && !slow {
		p.inner.Record()
		l.learn(p.class, p.level, took, now)
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

// learn judges a call of class that started at level and took d, ending
// at now, against its class's typical latency (queueSense). Only while the
// limit is in use (at least half of it in flight: with pools, one pool may
// be full while others idle): while the calls wait in the upstream's
// queue, the ceiling is cut by cutFactor once per window of calls
// (multiplicative decrease, down to Min); while they do not, it rises by
// one per window of calls, or per ceiling's worth above that (additive
// increase, up to Max and below the knee: kneeSense) — no faster than it
// can be cut, so that a limit a little above the upstream's capacity,
// where only some calls wait, does not drift upward. While it probes the
// level of a knee that expired, it rises kneeProbeSlow times slower. It
// rises only if it was pressed in the window before (Press): with pools,
// the seats kept free as headroom keep the calls below the limit, and a
// flood waiting beside them (which does not press it) would reach a limit
// raised meanwhile at once, building a queue in the upstream until the
// knee was found. A limit nobody uses
// does not climb either, and a wait we do not cause (a slow moment of a
// lightly used upstream) cuts nothing.
func (l *Limiter) learn(class, level int, d time.Duration, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	state, judged := l.sense.record(class, level, d, now, l.ceiling <= l.min, l.rules)
	if !l.rules.on(ruleQueueSense) {
		state, judged = queueHealthy, false
	}
	if judged {
		l.climb = l.pressed.Swap(false)
	}
	if judged && l.rules.on(ruleKnee) {
		// Below the knee, whatever the windows say (kneeSense).
		l.sense.knee.knee(int(l.ceiling)+1, now, l.rules)
		l.ceiling = min(l.ceiling, l.kneeCapLocked())
	}
	inUse := 2*l.inflight.Load() >= int64(l.Limit())
	switch {
	case !inUse:
		// A queue we do not fill is not ours to shrink, and a limit
		// nobody uses is not one to raise.
	case judged && state == queueQueueing:
		base := min(l.ceiling, float64(l.innerLimit.Load()))
		l.ceiling = max(l.min, math.Floor(min(base*cutFactor, base-1)))
	case state == queueHealthy || state == queueUnknown:
		step := 1 / max(l.ceiling, senseWindow)
		if !l.rules.on(ruleLateCalls) {
			step = 1 / l.ceiling
		}
		if p := l.sense.knee.probing; p > 0 && (l.ceiling+step > float64(p-1) || !l.rules.on(ruleFullSpeedBelowProbe)) && l.rules.on(ruleKnee) && l.rules.on(ruleQueueSense) {
			step /= kneeProbeSlow
		}
		if l.climb || !l.rules.on(rulePress) || !l.rules.on(ruleQueueSense) {
			l.ceiling = min(l.max, l.kneeCapLocked(), l.ceiling+step)
		}
	}
	l.ceilingInt.Store(int64(l.ceiling))
}

// kneeCapLocked is the highest ceiling below the knee, or Max without one
// (or without ruleKnee, which never looks for one). l.mu must be held.
func (l *Limiter) kneeCapLocked() float64 {
	if k := l.sense.knee.last; k > 0 {
		return max(l.min, float64(k-1))
	}
	return l.max
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
	class    int
	level    int // calls in flight when it started, itself included
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
