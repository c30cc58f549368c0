package shed

import (
	"math"
	"time"
)

// The upstream's capacity, seen from how many calls were in flight when
// each call started.
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
// the knee, and the limit stays below it. A level forgets with time, so
// that the limit probes above the knee again now and then: an upstream
// that grew finds its new capacity used.

const (
	// maxKneeLevel is the highest level kept; calls started above it
	// count at it.
	maxKneeLevel = 256
	// kneeRatio: a level whose calls took this many times their classes'
	// typical latencies (geometric mean) waited for the upstream.
	kneeRatio = 1.25
	// kneeWeight is how many calls (decayed) a level needs to be judged;
	// the knee found stays the knee down to kneeKeep, so that it is
	// probed again only every 20 s or so (kneeMemory × ln(kneeWeight ÷
	// kneeKeep)), not as soon as its last calls begin to fade.
	kneeWeight = 16
	kneeKeep   = 2
	// kneeMemory is the time constant with which a level forgets its
	// calls.
	kneeMemory = 10 * time.Second
)

// kneeSense is what the calls at each level said. It is not safe for
// concurrent use: Limiter guards it.
type kneeSense struct {
	sum    [maxKneeLevel + 1]float64 // Σ log(latency/typical), decayed
	weight [maxKneeLevel + 1]float64 // calls, decayed
	at     [maxKneeLevel + 1]time.Time
	last   int // the knee last found, or 0
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

// knee returns the lowest level up to upTo whose calls waited, judged at
// now, or 0 if none did.
func (k *kneeSense) knee(upTo int, now time.Time) int {
	k.last = k.find(upTo, now)
	return k.last
}

func (k *kneeSense) find(upTo int, now time.Time) int {
	for level := 1; level <= min(upTo, maxKneeLevel); level++ {
		least := float64(kneeWeight)
		if level == k.last {
			least = kneeKeep
		}
		if k.weight[level] < least {
			continue // too few even before decay
		}
		d := k.decay(level, now)
		if w := k.weight[level] * d; w >= least && k.sum[level]*d/w > math.Log(kneeRatio) {
			return level
		}
	}
	return 0
}

// proven returns the highest level up to upTo whose calls did not wait
// (at least kneeWeight of them, judged at now), or 0.
func (k *kneeSense) proven(upTo int, now time.Time) int {
	for level := min(upTo, maxKneeLevel); level >= 1; level-- {
		if k.weight[level] < kneeWeight {
			continue
		}
		d := k.decay(level, now)
		if w := k.weight[level] * d; w >= kneeWeight && k.sum[level]*d/w <= math.Log(kneeRatio) {
			return level
		}
	}
	return 0
}
