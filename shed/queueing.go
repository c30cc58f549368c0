package shed

import (
	"math"
	"time"
)

const (
	// MaxLatencyClasses is how many classes (routes) a Limiter keeps a
	// typical latency for; the calls of higher classes share the last.
	MaxLatencyClasses = 64
	// senseWindow is how many calls each judgement of the queue looks
	// at: the geometric mean of their latencies over their classes'
	// typical ones.
	senseWindow = 32
	// senseWarm is how many calls of a class set its typical latency
	// before its calls are judged.
	senseWarm = 16
	// queueingRatio: above this geometric mean of latency over typical
	// latency, calls wait in the upstream's queue (a 5 ms read taking
	// 6 ms is enough when reads are half of the calls). healthyRatio:
	// below it, the upstream has room. Between them the limit holds.
	queueingRatio = 1.2
	healthyRatio  = 1.05
	// typicalDrift is how fast a class's typical latency follows its
	// calls: a median moving in steps of the logarithm, at most this much
	// per second (10%), whatever the rate of calls; while the upstream
	// queues it moves ten times slower, so that the queue is not learnt
	// as the new normal, yet a route that really became slower is, in a
	// minute or so.
	typicalDrift = 0.1
	// lateFactor: a call that takes this many times its class's usual
	// slow latency (its 90th percentile) is late — it waited for
	// something its class does not wait for in the normal way of things
	// (a 5 ms read behind a full connection pool). lateCalls late calls
	// in a window mean a queue even when the other calls of the window
	// keep the mean down; one late call holds the limit where it is.
	lateFactor = 3
	lateCalls  = 2
)

// queueState is the judgement of the latest window of calls.
type queueState int

const (
	queueUnknown queueState = iota // fewer than a window of judged calls
	queueHealthy
	queueHolding
	queueQueueing
)

// queueSense is the upstream's queue, seen from its latencies: it keeps
// each class's typical latency and judges windows of calls against them.
// It is not safe for concurrent use: Limiter guards it.
//
// A gradient of recent over baseline latency (failsafe-go's, Netflix's)
// assumes that every call costs about the same. Behind an API whose routes
// take 5 ms and 300 ms, the calls' latencies say more about which routes
// were called than about the upstream's queue: the gradient's quantile
// follows the mix, its baseline follows the quantile, and a limit above
// what the upstream serves at once goes unnoticed while its queue holds a
// 5 ms read behind a 300 ms export. queueSense compares each call with the
// typical latency of its own route (its class) instead: with the route mix
// taken out, what is left is the wait every call shares.
type queueSense struct {
	typical [MaxLatencyClasses]float64 // log of seconds, per class
	slow    [MaxLatencyClasses]float64 // log of the 90th percentile, per class
	seen    [MaxLatencyClasses]int
	last    [MaxLatencyClasses]time.Time // when typical last moved
	sum     float64                      // Σ log(latency/typical) over the current window
	n       int                          // calls in the current window
	late    int                          // late calls in the current window
	state   queueState
	knee    kneeSense
}

// record judges one call of class that started at level (calls in flight,
// itself included) and took d, ending at now, and returns the state,
// which changes once per window of calls. atMin says the limit is as low
// as it goes: calls that still wait then are not waiting for what we
// send, and the typical latencies follow them at full speed. rules are
// the Limiter's (ruleLateCalls).
func (q *queueSense) record(class, level int, d time.Duration, now time.Time, atMin bool, rules rule) (state queueState, judged bool) {
	class = min(max(class, 0), MaxLatencyClasses-1)
	x := math.Log(max(d.Seconds(), 1e-6))
	if q.seen[class] < senseWarm {
		// A running mean of the first calls' logs: a start for the
		// median, which then moves in small steps.
		q.seen[class]++
		q.typical[class] += (x - q.typical[class]) / float64(q.seen[class])
		if q.seen[class] == 1 || x > q.slow[class] {
			q.slow[class] = x
		}
		q.last[class] = now
		return q.state, false
	}
	t, slow := q.typical[class], q.slow[class]
	q.knee.record(level, x-t, now)
	step := typicalDrift * min(now.Sub(q.last[class]).Seconds(), 1)
	q.last[class] = now
	if q.state == queueQueueing && !atMin {
		step /= 10
	}
	if x > t {
		q.typical[class] += step
	} else {
		q.typical[class] -= step
	}
	// The 90th percentile moves up nine times as far as down: it rests
	// where one call in ten is above it. It starts at the slowest of the
	// first calls, and never falls below the median.
	if x > slow {
		q.slow[class] += 1.8 * step
	} else {
		q.slow[class] = max(slow-0.2*step, q.typical[class])
	}
	q.sum += x - t
	q.n++
	if x > slow+math.Log(lateFactor) && rules.on(ruleLateCalls) {
		q.late++
	}
	if q.n < senseWindow {
		return q.state, false
	}
	ratio := math.Exp(q.sum / float64(q.n))
	late := q.late
	q.sum, q.n, q.late = 0, 0, 0
	switch {
	case ratio > queueingRatio || late >= lateCalls:
		q.state = queueQueueing
	case late > 0:
		q.state = queueHolding
	case ratio < healthyRatio:
		q.state = queueHealthy
	default:
		q.state = queueHolding
	}
	return q.state, true
}
