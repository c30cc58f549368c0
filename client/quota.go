package client

import "time"

// quota is the client's model of one server quota: remaining units r and
// seconds to reset t as last observed, refilling at rate if known, minus
// the units of the sends reserved since (its window). Its state is shared
// by every route it applies to: any response that reports it updates it.
type quota struct {
	name string
	// partial is set once a response reported quotas without this one
	// (or this one first appeared after other responses): it then paces
	// only the routes whose responses named it. Until then it paces every
	// route, a route never seen before included.
	partial bool
	// at is when r and t were observed; zero before any observation. seq
	// is the pace's observation count then: a reservation made at a
	// count ≥ seq is in the window.
	at  time.Time
	seq uint64
	// r is the remaining units, t the seconds until the reset (fairgate:
	// until the bucket is full again).
	r, t float64
	// limit is the policy's quota in units (RateLimit-Policy q, or
	// RateLimit-Limit); 0 when unknown.
	limit float64
	// rate is the refill in units per second (q/w of the policy); 0 when
	// unknown, and then nothing is assumed to refill before the reset.
	rate float64

	// The window: sent counts the sends reserved since at, spent their
	// assumed units, guessed those whose route had no learned cost yet.
	// route is the route of the first of them; mixed is set when another
	// route's followed.
	sent, guessed int
	spent         float64
	route         uint64
	mixed         bool

	// last is q's slot of the latest send reserved against it (see
	// pace.reserve), set by reservation lastID; prev is the one before
	// (for cancel). The next send is spaced from last.
	last, prev time.Time
	lastID     uint64
	// hold is the end of the Retry-After of a 429 this quota refused: no
	// send of a route it paces before it.
	hold time.Time
}

// costEWMA is the weight of a new sample in a route's learned cost.
const costEWMA = 0.25

// refilled returns the units the model expects before the window's sends
// el seconds after the observation.
func (q *quota) refilled(el float64) float64 {
	e := q.r + q.rate*el
	if q.limit > 0 {
		e = min(e, q.limit)
	}
	return e
}

// earliest returns the earliest time a request of c units may be sent
// under q at now; the zero Time means q does not constrain it. With E
// units left and the reset tLeft seconds away, sends are spaced
// c × tLeft / E after the latest one reserved: the remaining units last
// until the reset. Against a token bucket (tLeft = (limit - E)/rate) this
// settles with the bucket half full, sending at exactly the refill rate.
// With fewer units left than the request takes, it waits for the refill
// (or, without a known rate, the reset). No slot is after the reset.
func (q *quota) earliest(now time.Time, c float64) time.Time {
	if q.at.IsZero() {
		return time.Time{}
	}
	el := now.Sub(q.at).Seconds()
	tLeft := q.t - el
	if tLeft <= 0 {
		return time.Time{} // reset: full again
	}
	e := q.refilled(el) - q.spent
	if e < c {
		wait := tLeft
		if q.rate > 0 {
			wait = min(wait, (c-e)/q.rate)
		}
		return now.Add(seconds(wait))
	}
	// Never past the reset: the quota is full again then, as earliest
	// itself answers from then on, however many sends are queued.
	slot := q.last.Add(seconds(c * tLeft / e))
	if reset := now.Add(seconds(tLeft)); slot.After(reset) {
		return reset
	}
	return slot
}

// count adds the reserved send res, at q's slot for it, to q's window.
func (q *quota) count(res *reservation, slot time.Time) {
	if q.sent == 0 {
		q.route, q.mixed = res.key, false
	} else if q.route != res.key {
		q.mixed = true
	}
	q.sent++
	q.spent += res.cost
	if res.guessed {
		q.guessed++
	}
	if slot.After(q.last) {
		q.prev, q.last, q.lastID = q.last, slot, res.id
	}
}

// uncount takes the reserved send res, never sent, out of q's window
// (unless an observation has since started a new one), and gives its slot
// back when it was the latest.
func (q *quota) uncount(res *reservation) {
	if res.seq >= q.seq && q.sent > 0 {
		q.sent--
		q.spent = max(q.spent-res.cost, 0)
		if res.guessed && q.guessed > 0 {
			q.guessed--
		}
	}
	if q.lastID == res.id {
		q.last, q.lastID = q.prev, 0
	}
}

// sample tells, from r observed at now, the units one request of a route
// took from q: of the window's route, when every send of the window is
// of one route (the drop shared among them); else of res's route, when
// res is in the window and every other send of it has a learned cost (the
// drop less their assumed units). ok is false when it cannot tell: no
// earlier observation, an empty window, a reset in between, or a mixed
// window with guesses in it. bit is q's bit in res.quotas.
func (q *quota) sample(now time.Time, r float64, res *reservation, bit uint64) (key uint64, c float64, ok bool) {
	if q.sent == 0 || q.at.IsZero() {
		return 0, 0, false
	}
	el := now.Sub(q.at).Seconds()
	if el >= q.t {
		return 0, 0, false // reset in between: the drop is unknown
	}
	drop := q.refilled(el) - r
	switch {
	case !q.mixed:
		return q.route, drop / float64(q.sent), true
	case res.quotas&bit != 0 && res.seq >= q.seq && q.guessed == b2i(res.guessed):
		return res.key, drop - (q.spent - res.cost), true
	}
	return 0, 0, false
}

// set starts a new window from r and t observed at now, at the pace's
// observation count seq.
func (q *quota) set(now time.Time, r, t float64, seq uint64) {
	q.at, q.seq, q.r, q.t = now, seq, r, t
	q.sent, q.guessed, q.spent, q.mixed = 0, 0, 0, false
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// seconds converts s to a Duration, at most maxRetryAfter: a server's
// absurd reset must not overflow into the past.
func seconds(s float64) time.Duration {
	return time.Duration(min(s, maxRetryAfter.Seconds()) * float64(time.Second))
}
