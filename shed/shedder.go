package shed

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// minAdmit is the smallest fraction of traffic the Shedder admits, so
	// that it keeps seeing utilisation and can scale admission back up.
	minAdmit = 0.01
	// fillEps is the smoothed queue fill below which the queue counts as
	// empty.
	fillEps = 0.01
	// fracOne is the fixed-point unit of the fraction of the threshold
	// level that is rejected.
	fracOne = 1 << 16
)

// Pressure is what the caller observed of the pools and the limit at one
// instant. Zero fields mean none: no queue, no limit known.
type Pressure struct {
	// Queued is the number of requests waiting in the pools' queues.
	Queued int
	// QueueCap is the pools' total queue capacity. With no queue
	// (QueueCap 0), a saturated limit counts as a full queue.
	QueueCap int
	// Inflight is the number of requests being served upstream.
	Inflight int
	// Limit is the total concurrency limit (the adaptive limit, or the
	// fixed total).
	Limit int
}

// utilisation returns Inflight/Limit in [0, 1].
func (p Pressure) utilisation() float64 {
	if p.Limit <= 0 {
		return 0
	}
	return min(1, float64(p.Inflight)/float64(p.Limit))
}

// fill returns Queued/QueueCap in [0, 1].
func (p Pressure) fill() float64 {
	switch {
	case p.QueueCap > 0:
		return min(1, float64(p.Queued)/float64(p.QueueCap))
	case p.Limit > 0 && p.Inflight >= p.Limit:
		return 1
	}
	return 0
}

// Shedder rejects the least important requests under genuine overload. It
// keeps a threshold: Admit rejects a priority below it, rejects a fixed
// fraction of the priority at it, and admits a priority above it.
//
// The threshold is recomputed once per calibration interval from the
// pressure the caller reports with Observe (sooner when the queue is full,
// or when the pressure has clearly gone). It is chosen so that the fraction
// of the last interval's requests it would reject equals the fraction the
// overload calls for, taken from the lowest priorities up. That fraction is
// adjusted multiplicatively: divided by (1 + queue fill) while the queue is
// not empty, scaled up to fill the idle share of the limit while it is. A
// Shedder with no pressure, or with no Observe calls, sheds nothing.
//
// A Shedder is safe for concurrent use; Admit takes no lock. Build one with
// [NewShedder].
type Shedder struct {
	disabled    bool
	interval    time.Duration
	maxRetry    time.Duration
	attempts    [levels]atomic.Int64 // Admit calls per priority since the last calibration
	state       atomic.Pointer[shedState]
	atThreshold atomic.Uint64 // Admit calls at the threshold level, for the partial rejection

	mu       sync.Mutex
	started  bool      // guarded by mu
	admit    float64   // fraction of traffic to admit, in [minAdmit, 1]; guarded by mu
	util     float64   // smoothed Inflight/Limit; guarded by mu
	fillAvg  float64   // smoothed Queued/QueueCap; guarded by mu
	lastSeen time.Time // last Observe; guarded by mu
	lastCal  time.Time // last calibration; guarded by mu
	counts   [levels]int64
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
	cfg = cfg.withDefaults()
	s := &Shedder{
		disabled: cfg.Disabled,
		interval: cfg.CalibrationInterval,
		maxRetry: cfg.MaxRetryAfter,
		admit:    1,
	}
	s.state.Store(&shedState{})
	return s, nil
}

// Admit reports whether a request of priority p may proceed and, if not,
// when the client should retry (at least the calibration interval, longer
// the more traffic is being shed, at most MaxRetryAfter). Priorities outside
// [MinPriority, MaxPriority] count as the nearest bound. Admit never blocks.
func (s *Shedder) Admit(p Priority) (ok bool, retryAfter time.Duration) {
	if s.disabled {
		return true, 0
	}
	p = p.clamp()
	s.attempts[p].Add(1)
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

// Threshold returns the current threshold: priorities below it are
// rejected, a fraction of it may be, those above it are admitted. Zero when
// nothing is shed.
func (s *Shedder) Threshold() Priority {
	return s.state.Load().threshold
}

// Observe records the pressure seen at now and recomputes the threshold if
// a calibration is due. Call it at least once per calibration interval
// while there is traffic (on every request, or from a ticker); a Shedder
// that is not told about pressure sheds nothing.
func (s *Shedder) Observe(now time.Time, p Pressure) {
	if s.disabled {
		return
	}
	u, q := p.utilisation(), p.fill()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		s.started = true
		s.util, s.fillAvg = u, q
		s.lastSeen, s.lastCal = now, now
		return
	}
	if dt := now.Sub(s.lastSeen); dt > 0 {
		// Exponential smoothing over a tenth of the interval: the recent
		// past, without the noise of a single instant.
		w := 1 - math.Exp(-float64(dt)/float64(s.interval/10))
		s.util += (u - s.util) * w
		s.fillAvg += (q - s.fillAvg) * w
		s.lastSeen = now
	}
	since := now.Sub(s.lastCal)
	early := since >= s.interval/10 && (q >= 1 || // the pools are rejecting at random
		s.admit < 1 && s.fillAvg <= fillEps && s.util <= s.admit) // the overload has gone
	if since >= s.interval || early {
		s.calibrateLocked(now)
	}
}

// calibrateLocked recomputes the admitted fraction and the threshold.
// s.mu must be held.
func (s *Shedder) calibrateLocked(now time.Time) {
	s.lastCal = now
	switch {
	case s.fillAvg > fillEps:
		s.admit /= 1 + s.fillAvg
	case s.util <= 0:
		s.admit = 1
	default:
		s.admit = min(1, s.admit/s.util)
	}
	s.admit = max(s.admit, minAdmit)

	var total int64
	for i := range s.attempts {
		s.counts[i] = s.attempts[i].Swap(0)
		total += s.counts[i]
	}
	st := &shedState{}
	if s.admit < 1 && total > 0 {
		st = thresholdFor(s.counts[:], total, 1-s.admit)
		st.retryAfter = min(s.maxRetry, time.Duration(float64(s.interval)/s.admit))
	}
	s.state.Store(st)
}

// thresholdFor returns the threshold that rejects the fraction r of the
// requests counted per level in counts (total in all), lowest levels first.
func thresholdFor(counts []int64, total int64, r float64) *shedState {
	target := r * float64(total)
	var below float64
	for level, c := range counts {
		if c == 0 {
			continue
		}
		if below+float64(c) > target {
			f := (target - below) / float64(c)
			return &shedState{threshold: Priority(level), reject: uint64(min(f*fracOne, fracOne-1))}
		}
		below += float64(c)
	}
	return &shedState{threshold: MaxPriority, reject: fracOne - 1}
}
