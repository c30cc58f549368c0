package shed

import (
	"math"
	"time"
)

const (
	// maxKneeLevel is the highest level kept; calls started above it
	// count at it.
	maxKneeLevel = 256
	// kneeRatio: a level whose calls took this many times their classes'
	// typical latencies (geometric mean) waited for the upstream.
	kneeRatio = 1.25
	// kneeClear: a level whose calls took at most this many times their
	// classes' typical latencies did not wait; between kneeClear and
	// kneeRatio, a probe cannot tell.
	kneeClear = 1.1
	// kneeWeight is how many calls (decayed) a level needs to be judged.
	kneeWeight = 16
	// kneeMemory is the time constant with which a level forgets its
	// calls.
	kneeMemory = 3 * time.Second
	// kneeHold is how long a knee first holds the limit below it before
	// the limit probes its level again; kneeHoldMax, how long a knee that
	// every probe found again holds at most.
	kneeHold    = time.Second
	kneeHoldMax = 4 * time.Second
	// kneeProbeSlow: while it probes the level of a knee that expired, the
	// limit climbs this many times slower than it otherwise would, so that
	// the calls above the knee are few before it is found again.
	kneeProbeSlow = 8
)

// kneeSense is the upstream's capacity, seen from how many calls were in
// flight when each call started: what the calls at each level said. It is
// not safe for concurrent use: Limiter guards it.
//
// A queue in front of the upstream's connections delays exactly the calls
// that start while they are all taken: those started with more calls in
// flight than the upstream serves at once. queueSense judges windows of
// calls together, and a limit a few calls above the capacity, where a
// read now and then finds every connection taken by exports, reads as
// healthy to it: the limit climbs, and the reads of the light tenants the
// pools keep seats free for wait in the upstream's queue all the same.
// kneeSense keeps, for each number of calls in flight at a call's start
// (its level), how much slower than its class's typical latency the calls
// started there were. The lowest level whose calls were clearly slower is
// the knee, and the limit stays below it.
//
// A knee holds for a while (kneeHold), and then the limit probes its level
// again, slowly: an upstream that recovered from an incident, or grew, is
// found at once, and its capacity used. A probe that finds the knee where
// it was holds it twice as long as before (up to kneeHoldMax), so that a
// steady upstream is probed — and the calls of the probe made to wait —
// ever more rarely; one that finds the upstream changed starts over.
type kneeSense struct {
	sum    [maxKneeLevel + 1]float64 // Σ log(latency/typical), decayed
	weight [maxKneeLevel + 1]float64 // calls, decayed
	at     [maxKneeLevel + 1]time.Time
	last   int           // the knee, or 0
	since  time.Time     // when last was found
	hold   time.Duration // how long last holds: kneeHold, doubled by each probe that finds it again
	// probing is the knee that last expired, while the limit probes its
	// level: until a knee is found again or the calls at its level are
	// seen not to wait.
	probing int
}

// record counts a call started at level that took exp(excess) times its
// class's typical latency, ending at now.
func (k *kneeSense) record(level int, excess float64, now time.Time) {
	level = min(max(level, 1), maxKneeLevel)
	d := k.decay(level, now)
	k.sum[level] = k.sum[level]*d + excess
	k.weight[level] = k.weight[level]*d + 1
	k.at[level] = now
}

// decay is how much of level's calls is remembered at now.
func (k *kneeSense) decay(level int, now time.Time) float64 {
	if k.at[level].IsZero() {
		return 0
	}
	return math.Exp(-now.Sub(k.at[level]).Seconds() / kneeMemory.Seconds())
}

// knee returns the knee at now, looking at levels up to upTo, or 0 if
// there is none, by the Limiter's rules (ruleKneeExpires,
// ruleProbeJudgesAbove).
func (k *kneeSense) knee(upTo int, now time.Time, rules rule) int {
	if k.last > 0 && rules.on(ruleKneeExpires) && now.Sub(k.since) >= max(k.hold, kneeHold) {
		// Probe again: the knee's level and those above start afresh,
		// so that an upstream that recovered is seen as soon as its
		// calls are.
		for level := k.last; level <= maxKneeLevel; level++ {
			k.sum[level], k.weight[level] = 0, 0
		}
		k.probing, k.last = k.last, 0
	}
	found := k.find(upTo, now)
	if p := k.probing; p > 0 && (found == 0 || found > p) && k.judge(p, upTo, now, rules) > math.Log(kneeRatio) {
		// The probe's calls, at its level and above, waited together
		// before enough of them started at any one level: the knee is
		// where it was (kneeSense.judge).
		found = p
	}
	switch {
	case k.last > 0 && (found == 0 || found > k.last):
		// The knee holds, though the limit below it keeps its level's
		// calls from being seen again.
		return k.last
	case found != k.last:
		k.last, k.since = found, now
	}
	switch {
	case k.probing == 0:
	case found > 0 && found <= k.probing+1:
		// The knee is where it was: hold it twice as long next time.
		k.hold = min(2*max(k.hold, kneeHold), kneeHoldMax)
		k.probing = 0
	case found > 0 || k.judge(k.probing, upTo, now, rules) <= math.Log(kneeClear):
		// The upstream changed.
		k.hold = kneeHold
		k.probing = 0
	}
	return k.last
}

// find returns the lowest level up to upTo whose calls waited, judged at
// now, or 0 if none did.
func (k *kneeSense) find(upTo int, now time.Time) int {
	for level := 1; level <= min(upTo, maxKneeLevel); level++ {
		if k.weight[level] < kneeWeight {
			continue // too few even before decay
		}
		d := k.decay(level, now)
		if w := k.weight[level] * d; w >= kneeWeight && k.sum[level]*d/w > math.Log(kneeRatio) {
			return level
		}
	}
	return 0
}

// judge returns the mean log excess, at now, of the calls started at
// levels from up to upTo together, or NaN (which compares false to
// anything) while they are fewer than kneeWeight (decayed).
//
// A probe judges its level with the levels above it. The limit a probe
// raises is rarely reached: the pools keep seats free as headroom, and
// only a burst of the light tenants' requests beside the floods' takes
// the calls in flight to the probed level. By the time kneeWeight calls
// had started at that level alone, the limit had climbed two or three
// above it, and the floods, given the seats it added, had the light
// tenants' reads waiting behind their exports in the upstream's queue
// (and, once the knee was found, in the pools while the seats above the
// lowered limit drained). An upstream serving fewer calls than the
// probed level delays those above it the more; one that recovered
// delays none.
func (k *kneeSense) judge(from, upTo int, now time.Time, rules rule) float64 {
	from = min(max(from, 1), maxKneeLevel)
	var sum, w float64
	if !rules.on(ruleProbeJudgesAbove) {
		upTo = from
	}
	for level := from; level <= min(max(upTo, from), maxKneeLevel); level++ {
		if k.weight[level] == 0 {
			continue
		}
		d := k.decay(level, now)
		sum, w = sum+k.sum[level]*d, w+k.weight[level]*d
	}
	if w < kneeWeight {
		return math.NaN()
	}
	return sum / w
}
