package shed

import (
	"sync"
	"sync/atomic"
	"time"
)

const (
	// minAdmit is the smallest fraction of traffic the Shedder admits, so
	// that it keeps measuring the upstream and can scale admission back up.
	minAdmit = 0.01
	// queueTarget is the queue fill the Shedder aims to keep under
	// overload: enough queued work to keep every slot busy (goodput)
	// through bursts, far enough from full that the pools rarely reject at
	// random.
	queueTarget = 0.25
	// fracOne is the fixed-point unit of the fraction of the threshold
	// level that is rejected.
	fracOne = 1 << 16
)

// Pressure is what the caller observed of the pools and the limit at one
// instant. Zero fields mean none: no queue, no limit known.
type Pressure struct {
	// Queued is the number of requests waiting in the pools' queues.
	Queued int
	// QueueCap is the pools' total queue capacity, 0 for none.
	QueueCap int
	// Inflight is the number of requests being served upstream.
	Inflight int
	// Limit is the total concurrency limit (the adaptive limit, or the
	// fixed total).
	Limit int
	// Completed is the number of upstream calls finished since start, a
	// counter that only grows. The Shedder measures the upstream's
	// throughput from it.
	Completed uint64
	// CompletedWork is the work of those calls, each as it was given to
	// Admit or AdmitExempt (a work of zero or less counted as UnitWork),
	// added up: a counter that only grows. The Shedder weighs demand and
	// throughput by it (ruleWorkWeighted). Zero: the caller counts no
	// work, and each completed call counts as UnitWork.
	CompletedWork time.Duration
}

// UnitWork is the work a call counts for in the Shedder's plan when its
// caller knows none: a call of unknown length counts as one of 1 ms, and
// calls all of unknown length count alike.
const UnitWork = time.Millisecond

// workOf is the work a call of work w counts for, in nanoseconds, by the
// rules s applies: w, or UnitWork when w is unknown or the work is not
// weighed.
func (s *Shedder) workOf(w time.Duration) int64 {
	if w <= 0 || !s.rules.on(ruleWorkWeighted) {
		return int64(UnitWork)
	}
	return int64(w)
}

// utilisation returns Inflight/Limit in [0, 1].
func (p Pressure) utilisation() float64 {
	if p.Limit <= 0 {
		return 0
	}
	return min(1, float64(p.Inflight)/float64(p.Limit))
}

// Shedder rejects the least important requests under genuine overload. It
// keeps a threshold: Admit rejects a priority below it, rejects a fixed
// fraction of the priority at it (evenly spread, not at random), and admits
// a priority above it, so a higher priority is never shed while a lower one
// is admitted.
//
// Once per calibration interval it measures, over the interval, the demand
// (the work of the Admit calls per second: each call's expected hold of a
// seat, ruleWorkWeighted) and the upstream's capacity (the completed
// calls' work per second, divided by the mean share of the limit in use),
// and admits the fraction of demand that the capacity serves while the
// queue drains to a quarter full within one interval. The threshold is
// then the level below which that fraction of the recent requests' work
// lies, lowest levels first. A full
// queue (the pools rejecting whatever its priority) recalibrates sooner,
// after a tenth of the interval, and so does an idle limit with an empty
// queue while shedding (the overload has gone). A Shedder that is told of
// no pressure sheds nothing.
//
// A Shedder is safe for concurrent use; Admit takes no lock. Build one with
// [NewShedder].
type Shedder struct {
	disabled    bool
	interval    time.Duration
	maxRetry    time.Duration
	rules       rule                 // ruleWorkWeighted (rules.go); allRules but in negative controls
	attempts    [levels]atomic.Int64 // work (ns) of the Admit and AdmitExempt calls per priority since the last calibration
	calls       atomic.Int64         // the number of those calls
	state       atomic.Pointer[shedState]
	atThreshold atomic.Uint64 // Admit calls at the threshold level, for the partial rejection

	mu       sync.Mutex
	started  bool            // guarded by mu
	admit    float64         // fraction of demand admitted, in [minAdmit, 1]; guarded by mu
	winStart time.Time       // start of the measuring window; guarded by mu
	winDone  uint64          // Completed at winStart; guarded by mu
	winWork  time.Duration   // CompletedWork at winStart; guarded by mu
	capacity float64         // upstream throughput estimate, work (ns) per second, 0 until measured; guarded by mu
	busy     float64         // integral of utilisation over the window, in seconds; guarded by mu
	last     Pressure        // latest observation; guarded by mu
	lastSeen time.Time       // when last was observed; guarded by mu
	recent   [levels]float64 // work of the Admit and AdmitExempt calls per priority, halved at each calibration; guarded by mu
}

// shedState is the decision state Admit reads, replaced whole at each
// calibration.
type shedState struct {
	threshold  Priority
	reject     uint64 // fraction of the threshold level rejected, in 1/fracOne
	retryAfter time.Duration
}

// NewShedder returns a Shedder configured by cfg, or an error wrapping
// [ErrInvalidConfig] if cfg is invalid.
func NewShedder(cfg SheddingConfig) (*Shedder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	s := &Shedder{
		disabled: cfg.Disabled,
		interval: cfg.CalibrationInterval,
		maxRetry: cfg.MaxRetryAfter,
		admit:    1,
		rules:    allRules,
	}
	s.state.Store(&shedState{})
	return s, nil
}

// Admit reports whether a request of priority p and work w may proceed
// and, if not,
// when the client should retry: the calibration interval divided by the
// fraction of demand still admitted (the deeper the overload, the longer),
// at most MaxRetryAfter. Priorities outside [MinPriority, MaxPriority] count
// as the nearest bound. Admit never blocks and takes no lock.
//
// A call's work is how long it is expected to hold its seat (its route's
// mean hold; zero or less when unknown): the plan admits the share of the
// demand's work that the upstream serves, and the threshold sheds the
// lowest priorities' work first. Counted in calls instead, a mix whose
// exports are a fifth of the calls and nine tenths of the work sheds its
// critical reads as soon as more than the exports' fifth of the calls
// must go, while shedding half the exports would have been enough.
func (s *Shedder) Admit(p Priority, w time.Duration) (ok bool, retryAfter time.Duration) {
	if s.disabled {
		return true, 0
	}
	p = p.clamp()
	s.count(p, w)
	st := s.state.Load()
	switch {
	case p > st.threshold:
		return true, 0
	case p < st.threshold:
		return false, st.retryAfter
	case st.reject == 0:
		return true, 0
	}
	// Reject st.reject/fracOne of this level, spread evenly and without
	// randomness: call n is rejected when floor(n*f) steps.
	n := s.atThreshold.Add(1)
	if (n*st.reject)/fracOne != ((n-1)*st.reject)/fracOne {
		return false, st.retryAfter
	}
	return true, 0
}

// AdmitExempt counts a request of priority p and work w that shedding must not reject
// (its tenant is within its fair share of the pool: it is not why the queue
// builds) and admits it. Exempt requests are demand like any other, counted
// at their own priority, so the threshold keeps the priorities' order: a
// tenant that is within its share now and above it a moment later never has
// its critical requests shed to make room for its exempt sheddable ones.
// What exempt requests below the threshold take beyond the plan shows in
// the next calibration's queue, which raises the cut on the others. It
// never blocks and takes no lock.
func (s *Shedder) AdmitExempt(p Priority, w time.Duration) {
	if !s.disabled {
		s.count(p.clamp(), w)
	}
}

// count counts a call of priority p and work w in the demand.
func (s *Shedder) count(p Priority, w time.Duration) {
	s.attempts[p].Add(s.workOf(w))
	s.calls.Add(1)
}

// RetryAfter returns the Retry-After the Shedder gives shed requests now;
// zero when it sheds nothing.
func (s *Shedder) RetryAfter() time.Duration {
	return s.state.Load().retryAfter
}

// Threshold returns the current threshold: priorities below it are
// rejected, a fraction of it may be, those above it are admitted. Zero when
// nothing is shed.
func (s *Shedder) Threshold() Priority {
	return s.state.Load().threshold
}

// Observe records the pressure seen at now and recomputes the threshold if
// a calibration is due. Call it often, at least a few times per
// calibration interval while there is traffic (on every request, or from a
// ticker at a tenth of the interval): utilisation is averaged over the
// observations.
func (s *Shedder) Observe(now time.Time, p Pressure) {
	if s.disabled {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		s.started = true
		s.winStart, s.winDone, s.winWork = now, p.Completed, s.completedWork(p)
		s.last, s.lastSeen = p, now
		return
	}
	if dt := now.Sub(s.lastSeen); dt > 0 {
		s.busy += s.last.utilisation() * dt.Seconds()
		s.lastSeen = now
	}
	s.last = p
	since := now.Sub(s.winStart)
	full := p.QueueCap > 0 && p.Queued >= p.QueueCap
	gone := s.admit < 1 && p.Queued == 0 && p.Inflight < p.Limit
	if since >= s.interval || since >= s.interval/10 && (full || gone) {
		s.calibrateLocked(now)
	}
}

// calibrateLocked recomputes the admitted fraction and the threshold from
// the window that ends at now, and starts the next window. s.mu must be
// held.
func (s *Shedder) calibrateLocked(now time.Time) {
	span := now.Sub(s.winStart).Seconds()
	var total int64
	for i := range s.attempts {
		c := s.attempts[i].Swap(0)
		s.recent[i] = s.recent[i]/2 + float64(c)
		total += c
	}
	calls := s.calls.Swap(0)
	util := s.busy / span
	// The queue's excess, in work: its calls at the window's mean work.
	excess := float64(s.last.Queued) - queueTarget*float64(s.last.QueueCap)
	if calls > 0 {
		excess *= float64(total) / float64(calls)
	}
	done := s.completedWork(s.last)
	switch {
	case total == 0 || util <= 0 || s.last.Completed < s.winDone || done < s.winWork:
		s.admit = 1 // no demand, nothing in flight, or the counter was reset
	case s.admit >= 1 && excess <= 0 && s.last.Completed == s.winDone:
		// Calls in flight, none finished in this window (calls longer
		// than the window, or the first window) and no queue beyond its
		// target: nothing was measured and nothing is waiting, so this is
		// no overload. (Measuring zero capacity here shed 99%.)
		s.admit = 1
	default:
		demand := float64(total) / span
		measured := float64(done-s.winWork) / span / util
		if w := min(1, span/s.interval.Seconds()); s.capacity > 0 {
			// A short window (an early calibration) is weighed by its
			// length against the previous estimate.
			measured = s.capacity*(1-w) + measured*w
		}
		s.capacity = measured
		capacity := measured
		s.admit = min(1, max(minAdmit, (capacity-excess/s.interval.Seconds())/demand))
	}
	s.winStart, s.winDone, s.winWork, s.busy = now, s.last.Completed, done, 0

	st := &shedState{}
	if s.admit < 1 {
		st = thresholdFor(s.recent[:], 1-s.admit)
		st.retryAfter = min(s.maxRetry, time.Duration(float64(s.interval)/s.admit))
	}
	s.state.Store(st)
}

// completedWork is p's CompletedWork, or its calls at UnitWork when s does
// not weigh work or the caller counts none.
func (s *Shedder) completedWork(p Pressure) time.Duration {
	if !s.rules.on(ruleWorkWeighted) || p.CompletedWork == 0 {
		return time.Duration(p.Completed) * UnitWork
	}
	return p.CompletedWork
}

// thresholdFor returns the threshold that rejects the fraction r of the
// work counted per level in counts, lowest levels first.
func thresholdFor(counts []float64, r float64) *shedState {
	var total float64
	for _, c := range counts {
		total += c
	}
	target := r * total
	var below float64
	for level, c := range counts {
		if c == 0 {
			continue
		}
		if below+c > target {
			f := (target - below) / c
			return &shedState{threshold: Priority(level), reject: uint64(min(f*fracOne, fracOne-1))}
		}
		below += c
	}
	return &shedState{threshold: MaxPriority, reject: fracOne - 1}
}
