package shed

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// The overload simulation: a pool of simSlots workers, each call taking
// simService, behind a FIFO queue of simQueue (the bulkhead), with the
// Shedder in front. Time advances in 1ms ticks; arrivals are Poisson from a
// seeded generator, so every run is the same.
const (
	simSlots    = 20
	simService  = 100 * time.Millisecond
	simQueue    = 40
	simCapacity = float64(simSlots) / 0.1 // calls/s the pool can complete
	simTick     = time.Millisecond
)

// simClass is one kind of request in the offered mix.
type simClass struct {
	rank   int
	crit   Criticality
	weight float64
	// service is how long a call of the class takes, told to the
	// Shedder as its work; zero: simService, told as unknown.
	service time.Duration
}

// simMix: three tiers alike; 1/6 critical, 1/3 default, 1/2 sheddable.
var simMix = func() []simClass {
	var mix []simClass
	for rank := range 3 {
		mix = append(mix,
			simClass{rank, Critical, 1.0 / 18, 0},
			simClass{rank, Default, 1.0 / 9, 0},
			simClass{rank, Sheddable, 1.0 / 6, 0})
	}
	return mix
}()

// simPhase is a stretch of constant offered load, as a multiple of
// simCapacity.
type simPhase struct {
	d    time.Duration
	load float64
}

// simStats counts what happened to the requests that arrived in one phase.
type simStats struct {
	arrived, shed, poolRejected, completed [3]int // by Criticality
	goodput                                int    // completions during the phase, whoever arrived
}

func (s simStats) total(a [3]int) int { return a[0] + a[1] + a[2] }

// simResult is the outcome of a run.
type simResult struct {
	phases []simStats
	// orderViolations counts shed requests whose priority was above a
	// priority admitted while the threshold stood where it was.
	orderViolations int
	// lastShed is when the last request was shed.
	lastShed time.Time
	// maxThreshold is the highest threshold seen.
	maxThreshold Priority
	// lastRetry is the Retry-After of the last shed request.
	lastRetry time.Duration
}

type simRequest struct {
	crit    Criticality
	phase   int
	done    time.Time
	service time.Duration
	work    time.Duration // as the Shedder counts it
}

// simulate runs phases of simMix, each call taking simService.
func simulate(t *testing.T, seed uint64, cfg SheddingConfig, phases []simPhase) simResult {
	return simulateMix(t, seed, cfg, phases, simMix, simCapacity, allRules)
}

// simulateMix runs phases of mix, whose calls the pool completes at
// capacity calls/s, against a Shedder applying rules.
func simulateMix(t *testing.T, seed uint64, cfg SheddingConfig, phases []simPhase, mix []simClass, capacity float64, rules rule) simResult {
	t.Helper()
	s, err := NewShedder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.rules = rules
	rng := rand.New(rand.NewPCG(seed, 2))
	res := simResult{phases: make([]simStats, len(phases))}
	var (
		now     = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		done    uint64        // completions so far
		work    time.Duration // their work, as the Shedder counts it
		busy    []simRequest  // in service
		queue   []simRequest  // waiting, FIFO
		epochT  = Priority(-1)
		maxShed = Priority(-1)
		minAdm  = MaxPriority + 1
	)
	for pi, ph := range phases {
		mean := ph.load * capacity * simTick.Seconds()
		for end := now.Add(ph.d); now.Before(end); now = now.Add(simTick) {
			// Completions, then the queue into the freed slots.
			kept := busy[:0]
			for _, r := range busy {
				if r.done.After(now) {
					kept = append(kept, r)
					continue
				}
				res.phases[r.phase].completed[r.crit]++
				done++
				work += r.work
				res.phases[pi].goodput++
			}
			busy = kept
			for len(busy) < simSlots && len(queue) > 0 {
				r := queue[0]
				queue = queue[1:]
				r.done = now.Add(r.service)
				busy = append(busy, r)
			}
			// Arrivals.
			for range poisson(rng, mean) {
				c := pick(rng, mix)
				p := PriorityFor(c.rank, c.crit)
				st := &res.phases[pi]
				st.arrived[c.crit]++
				ok, retry := s.Admit(p, c.service)
				if th := s.Threshold(); th != epochT {
					epochT, maxShed, minAdm = th, -1, MaxPriority+1
				}
				res.maxThreshold = max(res.maxThreshold, epochT)
				if !ok {
					if retry < cfg.WithDefaults().CalibrationInterval {
						t.Fatalf("Retry-After %v below the calibration interval", retry)
					}
					st.shed[c.crit]++
					res.lastShed, res.lastRetry = now, retry
					maxShed = max(maxShed, p)
				} else {
					minAdm = min(minAdm, p)
				}
				if maxShed > minAdm {
					res.orderViolations++
				}
				if !ok {
					continue
				}
				r := simRequest{crit: c.crit, phase: pi, service: c.service, work: c.service}
				if c.service <= 0 {
					r.service, r.work = simService, UnitWork
				}
				switch {
				case len(busy) < simSlots:
					r.done = now.Add(r.service)
					busy = append(busy, r)
				case len(queue) < simQueue:
					queue = append(queue, r)
				default:
					st.poolRejected[c.crit]++
				}
			}
			s.Observe(now, Pressure{Queued: len(queue), QueueCap: simQueue, Inflight: len(busy), Limit: simSlots, Completed: done, CompletedWork: work})
		}
	}
	return res
}

// poisson draws from a Poisson distribution of the given mean (Knuth).
func poisson(rng *rand.Rand, mean float64) int {
	limit, k, p := math.Exp(-mean), 0, rng.Float64()
	for p > limit {
		k++
		p *= rng.Float64()
	}
	return k
}

// pick draws a class from mix by weight.
func pick(rng *rand.Rand, mix []simClass) simClass {
	x := rng.Float64()
	for _, c := range mix {
		if x < c.weight {
			return c
		}
		x -= c.weight
	}
	return mix[len(mix)-1]
}

// The scenario: 5s at half capacity, 30s at three times capacity, 10s at
// half capacity again.
var overloadScenario = []simPhase{
	{5 * time.Second, 0.5},
	{30 * time.Second, 3},
	{10 * time.Second, 0.5},
}

const (
	phaseWarm, phaseOverload, phaseRecovery = 0, 1, 2
	// minCriticalSuccess is the share of critical requests that must
	// complete under overload.
	minCriticalSuccess = 0.99
	// minGoodput is the share of capacity that must still be served.
	minGoodput = 0.90
)

func criticalSuccess(st simStats) float64 {
	return float64(st.completed[Critical]) / float64(st.arrived[Critical])
}

// simSeeds are the arrival sequences each claim is checked on.
var simSeeds = []uint64{1, 2, 3, 4}

func TestShedderOverload(t *testing.T) {
	for _, seed := range simSeeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { testOverload(t, seed) })
	}
}

func testOverload(t *testing.T, seed uint64) {
	res := simulate(t, seed, SheddingConfig{}, overloadScenario)
	ov := res.phases[phaseOverload]
	t.Logf("overload: arrived %v shed %v pool-rejected %v completed %v (by default/critical/sheddable); max threshold %d",
		ov.arrived, ov.shed, ov.poolRejected, ov.completed, res.maxThreshold)

	if got := criticalSuccess(ov); got < minCriticalSuccess {
		t.Errorf("critical success under 3x overload = %.4f, want >= %.2f", got, minCriticalSuccess)
	}
	if got := float64(ov.goodput) / (simCapacity * 30); got < minGoodput {
		t.Errorf("goodput under 3x overload = %.3f of capacity, want >= %.2f", got, minGoodput)
	}
	if res.orderViolations != 0 {
		t.Errorf("%d requests shed above a priority admitted under the same threshold", res.orderViolations)
	}
	if ov.shed[Critical] != 0 {
		t.Errorf("%d critical requests shed while lower priorities were present", ov.shed[Critical])
	}
	// The pools' own rejections (queue full) are the ones that do not
	// respect priority; shedding must keep them rare.
	if got, limit := ov.total(ov.poolRejected), ov.total(ov.arrived)/100; got > limit {
		t.Errorf("%d queue-full rejections under overload, want <= 1%% of arrivals (%d)", got, limit)
	}
	if w := res.phases[phaseWarm]; w.total(w.shed) != 0 {
		t.Errorf("%d requests shed at half capacity before the overload", w.total(w.shed))
	}
}

func TestShedderRecovery(t *testing.T) {
	// After the overload stops, nothing is shed once one calibration
	// interval has passed.
	for _, seed := range simSeeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { testRecovery(t, seed) })
	}
}

func testRecovery(t *testing.T, seed uint64) {
	res := simulate(t, seed, SheddingConfig{}, overloadScenario)
	var end time.Duration
	for _, ph := range overloadScenario[:phaseRecovery] {
		end += ph.d
	}
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	stopped := start.Add(end)
	t.Logf("last request shed %v after the overload stopped", res.lastShed.Sub(stopped))
	if limit := stopped.Add(DefaultCalibrationInterval); res.lastShed.After(limit) {
		t.Errorf("last request shed %v after the overload stopped, want within %v",
			res.lastShed.Sub(stopped), DefaultCalibrationInterval)
	}
}

func TestShedderOffFailsCritical(t *testing.T) {
	// Negative control: the same overload with shedding off. The pool
	// rejects at random once its queue is full, so critical requests fail
	// about as often as any other, far below the bar.
	res := simulate(t, 1, SheddingConfig{Disabled: true}, overloadScenario)
	ov := res.phases[phaseOverload]
	got := criticalSuccess(ov)
	t.Logf("shedding off: critical success %.3f", got)
	if got >= minCriticalSuccess {
		t.Errorf("shedding off: critical success = %.4f, want < %.2f (the scenario does not exercise shedding)", got, minCriticalSuccess)
	}
}

// exportMix is the bench's overload mix in one tier: 55% critical reads of
// 5 ms, 25% searches of 20 ms, 20% sheddable exports of 300 ms — a fifth
// of the calls and nearly nine tenths of the work.
var exportMix = []simClass{
	{0, Critical, 0.55, 5 * time.Millisecond},
	{0, Default, 0.25, 20 * time.Millisecond},
	{0, Sheddable, 0.20, 300 * time.Millisecond},
}

// exportMixCapacity is the calls/s simSlots complete of exportMix.
var exportMixCapacity = float64(simSlots) / (0.55*0.005 + 0.25*0.020 + 0.20*0.300)

// Twice the capacity's work of exportMix: shedding a little over half the
// exports is enough, and the shedder sheds no critical read or search.
// Counted in calls (the negative control), the plan sheds a share of the
// calls deeper than the exports' fifth and reaches the searches and the
// reads. (The FIFO pool's own queue-full rejections, which fall on any
// call, are the pool's: 300 ms calls at full use swing its queue by
// dozens within a calibration interval.)
func TestShedderWeighsWork(t *testing.T) {
	phases := []simPhase{{5 * time.Second, 0.5}, {30 * time.Second, 2}}
	for _, seed := range simSeeds {
		res := simulateMix(t, seed, SheddingConfig{}, phases, exportMix, exportMixCapacity, allRules)
		ov := res.phases[1]
		t.Logf("seed %d: arrived %v shed %v pool-rejected %v (default/critical/sheddable)", seed, ov.arrived, ov.shed, ov.poolRejected)
		if ov.shed[Critical] != 0 || ov.shed[Default] != 0 {
			t.Errorf("seed %d: shed %d critical and %d default calls while exports were admitted", seed, ov.shed[Critical], ov.shed[Default])
		}
		if got := float64(ov.completed[Sheddable]) / float64(ov.arrived[Sheddable]); got < 0.3 {
			t.Errorf("seed %d: %.2f of the exports completed, want >= 0.3: twice the work leaves room for nearly half of them", seed, got)
		}
		if res.orderViolations != 0 {
			t.Errorf("seed %d: %d calls shed above a priority admitted under the same threshold", seed, res.orderViolations)
		}
	}
	counted := simulateMix(t, 1, SheddingConfig{}, phases, exportMix, exportMixCapacity, allRules&^ruleWorkWeighted).phases[1]
	t.Logf("counted in calls: shed %v pool-rejected %v", counted.shed, counted.poolRejected)
	if counted.shed[Critical] == 0 && counted.shed[Default] == 0 {
		t.Error("negative control: counted in calls, no read or search was shed; the test does not tell the plans apart")
	}
}

func TestShedderThresholdOrderAndPartial(t *testing.T) {
	s, err := NewShedder(SheddingConfig{})
	if err != nil {
		t.Fatal(err)
	}
	lo, mid, hi := PriorityFor(0, Sheddable), PriorityFor(0, Default), PriorityFor(0, Critical)
	// A quarter of the threshold level rejected.
	s.state.Store(&shedState{threshold: mid, reject: fracOne / 4, retryAfter: 3 * time.Second})
	var midRejected int
	for range 1000 {
		if ok, retry := s.Admit(lo, 0); ok || retry != 3*time.Second {
			t.Fatalf("Admit(below threshold) = %v, %v; want false, 3s", ok, retry)
		}
		if ok, _ := s.Admit(hi, 0); !ok {
			t.Fatal("Admit(above threshold) = false")
		}
		if ok, _ := s.Admit(mid, 0); !ok {
			midRejected++
		}
	}
	if midRejected != 250 {
		t.Errorf("rejected %d of 1000 at the threshold, want exactly 250 (deterministic quarter)", midRejected)
	}
	if got := s.Threshold(); got != mid {
		t.Errorf("Threshold() = %d, want %d", got, mid)
	}
	// Out-of-range priorities clamp.
	if ok, _ := s.Admit(-7, 0); ok {
		t.Error("Admit(-7) admitted below the threshold")
	}
	if ok, _ := s.Admit(10000, 0); !ok {
		t.Error("Admit(10000) rejected above the threshold")
	}
}

func TestThresholdFor(t *testing.T) {
	counts := make([]float64, levels)
	counts[100], counts[200], counts[300] = 50, 30, 20 // 100 requests
	for _, tc := range []struct {
		r      float64
		want   Priority
		reject float64
	}{
		{0, 100, 0},
		{0.25, 100, 0.5},
		{0.5, 200, 0},
		{0.65, 200, 0.5},
		{0.9, 300, 0.5},
	} {
		st := thresholdFor(counts, tc.r)
		if got := float64(st.reject) / fracOne; st.threshold != tc.want || got < tc.reject-0.001 || got > tc.reject+0.001 {
			t.Errorf("thresholdFor(r=%v) = level %d rejecting %.3f, want level %d rejecting %.3f", tc.r, st.threshold, got, tc.want, tc.reject)
		}
	}
}

func TestShedderRetryAfterGrowsWithOverload(t *testing.T) {
	// Deeper overload (more demand for the same capacity) means a smaller
	// admitted fraction and a longer Retry-After.
	retryAt := func(load float64) time.Duration {
		res := simulate(t, 1, SheddingConfig{}, []simPhase{{10 * time.Second, load}})
		return res.lastRetry
	}
	r2, r4 := retryAt(2), retryAt(4)
	t.Logf("Retry-After at 2x: %v, at 4x: %v", r2, r4)
	if r2 < DefaultCalibrationInterval || r4 <= r2 {
		t.Errorf("Retry-After at 2x = %v, at 4x = %v; want >= %v and growing", r2, r4, DefaultCalibrationInterval)
	}
}

// TestNoSheddingWithoutOverload: calls longer than the calibration interval
// at 30% utilisation, no queue: nothing is shed (windows with calls in
// flight and none finished measured a capacity of zero and shed 99%).
func TestNoSheddingWithoutOverload(t *testing.T) {
	s, err := NewShedder(SheddingConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	var ends []time.Time
	var completed uint64
	for i := range 200 {
		now := t0.Add(time.Duration(i) * 500 * time.Millisecond)
		k := 0
		for _, e := range ends {
			if e.After(now) {
				ends[k] = e
				k++
			} else {
				completed++
			}
		}
		ends = ends[:k]
		s.Observe(now, Pressure{Inflight: len(ends), Limit: 20, Completed: completed})
		if ok, _ := s.Admit(PriorityFor(0, Default), 0); !ok {
			t.Fatalf("shed at t=%v with %d of 20 in flight and no queue", now.Sub(t0), len(ends))
		}
		ends = append(ends, now.Add(3*time.Second))
	}
}

// TestNoSheddingAfterIdle: after an overload and a long silence, the first
// light requests are admitted.
func TestNoSheddingAfterIdle(t *testing.T) {
	s, err := NewShedder(SheddingConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	var completed uint64
	now := t0
	for ms := 0; ms <= 3000; ms += 10 {
		now = t0.Add(time.Duration(ms) * time.Millisecond)
		if ms%20 == 0 {
			completed++
		}
		s.Observe(now, Pressure{Queued: 64, QueueCap: 64, Inflight: 16, Limit: 16, Completed: completed})
		for j := range 10 {
			s.Admit(PriorityFor(0, []Criticality{Sheddable, Default}[j%2]), 0)
		}
	}
	if s.Threshold() == 0 {
		t.Fatal("the overload shed nothing: the scenario is not an overload")
	}
	completed += 24
	now = now.Add(60 * time.Second)
	for range 5 {
		now = now.Add(10 * time.Millisecond)
		s.Observe(now, Pressure{QueueCap: 64, Limit: 16, Completed: completed})
		if ok, _ := s.Admit(PriorityFor(0, Default), 0); !ok {
			t.Fatalf("shed after 60 s idle (threshold %d)", s.Threshold())
		}
	}
}

// overloadWith drives a Shedder through calibrations in which each interval
// sees loud calls at priority 200, exempt calls at priority exemptAt, and a
// queue at its target in front of an upstream that completes capacity
// calls an interval, and returns it.
func overloadWith(t *testing.T, loud, exemptCalls int, exemptAt Priority, capacity int) *Shedder {
	t.Helper()
	s, err := NewShedder(SheddingConfig{CalibrationInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	var done uint64
	for range 5 {
		for range 10 {
			for range loud / 10 {
				s.Admit(200, 0)
			}
			for range exemptCalls / 10 {
				s.AdmitExempt(exemptAt, 0)
			}
			done += uint64(capacity / 10)
			now = now.Add(100 * time.Millisecond)
			s.Observe(now, Pressure{Queued: 10, QueueCap: 40, Inflight: 10, Limit: 10, Completed: done})
		}
	}
	return s
}

// Exempt requests (tenants within their share) are never shed, but count
// as demand at their priority: the loud level absorbs the cut.
func TestAdmitExemptCountsButIsNeverShed(t *testing.T) {
	s := overloadWith(t, 100, 50, 300, 60)
	if th := s.Threshold(); th != 200 {
		t.Errorf("threshold %d, want 200: the cut falls on the loud level, not the exempt one", th)
	}
	rejected := 0
	for range 1000 {
		if ok, _ := s.Admit(200, 0); !ok {
			rejected++
		}
	}
	// Admitted: the capacity (60 of 150 calls), the 50 exempt calls
	// included, so about 10 of the 100 loud ones.
	if rejected < 800 {
		t.Errorf("loud level: %d of 1000 rejected, want most (exempt demand takes its part of the capacity)", rejected)
	}
	// Exempt demand below the loud level still keeps the order: a
	// priority above the threshold is admitted.
	s = overloadWith(t, 100, 50, 100, 60)
	if ok, _ := s.Admit(300, 0); !ok {
		t.Errorf("priority 300 shed at threshold %d though all demand is at 100 and 200", s.Threshold())
	}
}
