package client

import (
	"net/http"
	"strings"
	"sync"
	"time"
)

// pace is what the transport knows of one quota partition: a host called
// with one credential. It spaces that partition's requests so that the
// remaining tokens last until the reset (see the package doc), and holds
// them all after a 429 until its Retry-After. It is safe for concurrent
// use.
type pace struct {
	mu sync.Mutex
	// quotas has one entry per policy the RateLimit field named (usually
	// one; fairgate adds one for a route group), or one unnamed entry from
	// the RateLimit-Remaining/-Reset trio. A policy missing from a later
	// response keeps its state until its reset passes.
	quotas []quota
	// last is the latest send reserved; the next one is spaced from it.
	last time.Time
	// hold is the end of the last 429's Retry-After: no send before it.
	hold time.Time
}

// quota is the client's model of one server quota: remaining units r and
// seconds to reset t as last observed, refilling at rate if known, minus
// the units of the sends made since.
type quota struct {
	name string
	// at is when r and t were observed; zero before any observation.
	at time.Time
	// r is the remaining units, t the seconds until the reset (fairgate:
	// until the bucket is full again).
	r, t float64
	// limit is the policy's quota in units (RateLimit-Policy q, or
	// RateLimit-Limit); 0 when unknown.
	limit float64
	// rate is the refill in units per second (q/w of the policy); 0 when
	// unknown, and then nothing is assumed to refill before the reset.
	rate float64
	// cost is the learned units a request takes; 0 until learned (1 is
	// assumed).
	cost float64
	// sent counts the sends reserved since at.
	sent int
}

// costEWMA is the weight of a new sample in the learned cost.
const costEWMA = 0.25

// requestCost returns the units a request is assumed to take.
func (q *quota) requestCost() float64 {
	if q.cost == 0 {
		return 1
	}
	return q.cost
}

// tokens returns the units the model expects to be left el seconds after
// the observation.
func (q *quota) tokens(el float64) float64 {
	e := q.r + q.rate*el
	if q.limit > 0 {
		e = min(e, q.limit)
	}
	return e - q.requestCost()*float64(q.sent)
}

// earliest returns the earliest time a request may be sent under q at now,
// given the latest send reserved (last); the zero Time means q does not
// constrain it. With E units left and the reset tLeft seconds away, sends
// are spaced cost × tLeft / E apart: the remaining units last until the
// reset. Against a token bucket (tLeft = (limit - E)/rate) this settles
// with the bucket half full, sending at exactly the refill rate. With
// fewer units left than a request takes, it waits for the refill (or,
// without a known rate, the reset).
func (q *quota) earliest(now, last time.Time) time.Time {
	if q.at.IsZero() {
		return time.Time{}
	}
	el := now.Sub(q.at).Seconds()
	tLeft := q.t - el
	if tLeft <= 0 {
		return time.Time{} // reset: full again
	}
	c := q.requestCost()
	e := q.tokens(el)
	if e < c {
		wait := tLeft
		if q.rate > 0 {
			wait = min(wait, (c-e)/q.rate)
		}
		return now.Add(seconds(wait))
	}
	return last.Add(seconds(c * tLeft / e))
}

// observe sets q from a response's r and t at now. When learn is set and
// q's sends since the last observation are known, it first learns the
// cost of a request from how far r fell.
func (q *quota) observe(now time.Time, r, t float64, learn bool) {
	if learn && q.sent > 0 && !q.at.IsZero() {
		el := now.Sub(q.at).Seconds()
		if el < q.t { // no reset in between
			before := q.r + q.rate*el
			if q.limit > 0 {
				before = min(before, q.limit)
			}
			c := min(max((before-r)/float64(q.sent), 1), max(q.limit, 1))
			if q.cost == 0 {
				q.cost = c
			} else {
				q.cost += costEWMA * (c - q.cost)
			}
		}
	}
	q.at, q.r, q.t, q.sent = now, r, t, 0
}

// reservation is a send reserved by reserve, for cancel.
type reservation struct {
	at, prevLast time.Time
}

// reserve reserves the earliest send at or after now that the quotas and
// the hold allow, and reports false, reserving nothing, when that is after
// limit.
func (p *pace) reserve(now, limit time.Time) (reservation, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	at := now
	if p.hold.After(at) {
		at = p.hold
	}
	for i := range p.quotas {
		if e := p.quotas[i].earliest(now, p.last); e.After(at) {
			at = e
		}
	}
	if at.After(limit) {
		return reservation{at: at}, false
	}
	for i := range p.quotas {
		p.quotas[i].sent++
	}
	res := reservation{at: at, prevLast: p.last}
	if at.After(p.last) {
		p.last = at
	}
	return res, true
}

// cancel gives back a reservation whose request was never sent.
func (p *pace) cancel(res reservation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.quotas {
		p.quotas[i].sent = max(p.quotas[i].sent-1, 0)
	}
	if p.last.Equal(res.at) {
		p.last = res.prevLast
	}
}

// observe updates p from a response's headers at now. A 429 holds every
// send until its Retry-After (ra) and teaches no cost: fairgate takes no
// tokens for it.
func (p *pace) observe(now time.Time, h http.Header, status int, ra time.Duration) {
	learn := status != http.StatusTooManyRequests
	p.mu.Lock()
	defer p.mu.Unlock()
	if !learn && ra > 0 {
		if until := now.Add(ra); until.After(p.hold) {
			p.hold = until
		}
	}
	if vals := h[hdrRateLimit]; len(vals) > 0 {
		eachItem(vals, "r", "t", func(name string, r, t float64, okR, okT bool) {
			if okR && okT {
				p.quotaLocked(name).observe(now, r, t, learn)
			}
		})
		eachItem(h[hdrRateLimitPolicy], "q", "w", func(name string, lim, w float64, okQ, okW bool) {
			if q := p.findLocked(name); q != nil && okQ {
				q.limit = lim
				if okW && w > 0 {
					q.rate = lim / w
				}
			}
		})
		return
	}
	// The trio: one unnamed quota, no known refill.
	r, okR := leadingNumber(h.Get(hdrRateLimitRemaining))
	t, okT := leadingNumber(h.Get(hdrRateLimitReset))
	if !okR || !okT {
		return
	}
	if t > 1e9 { // a Unix time, as some servers send
		t = max(t-float64(now.Unix()), 0)
	}
	q := p.quotaLocked("")
	q.observe(now, r, t, learn)
	if lim, ok := leadingNumber(h.Get(hdrRateLimitLimit)); ok {
		q.limit = lim
	}
}

// findLocked returns the quota named name, or nil. Expects p.mu held.
func (p *pace) findLocked(name string) *quota {
	for i := range p.quotas {
		if p.quotas[i].name == name {
			return &p.quotas[i]
		}
	}
	return nil
}

// quotaLocked returns the quota named name, adding it when new (with the
// name copied, so that it does not pin the header). Expects p.mu held.
func (p *pace) quotaLocked(name string) *quota {
	if q := p.findLocked(name); q != nil {
		return q
	}
	p.quotas = append(p.quotas, quota{name: strings.Clone(name)})
	return &p.quotas[len(p.quotas)-1]
}

// idle reports whether p constrains nothing at now, so it may be dropped.
func (p *pace) idle(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold.After(now) || p.last.After(now) {
		return false
	}
	for i := range p.quotas {
		if !p.quotas[i].earliest(now, p.last).IsZero() {
			return false
		}
	}
	return true
}

// seconds converts s to a Duration, at most maxRetryAfter: a server's
// absurd reset must not overflow into the past.
func seconds(s float64) time.Duration {
	return time.Duration(min(s, maxRetryAfter.Seconds()) * float64(time.Second))
}
