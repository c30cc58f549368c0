package client

import (
	"net/http"
	"strings"
	"sync"
	"time"
)

// pace is what the transport knows of one quota partition: a host called
// with one credential. It spaces the requests of each route by the quotas
// that apply to it, so that their remaining units last until the reset
// (see the package doc), and holds them after a 429 until its
// Retry-After. It is safe for concurrent use.
type pace struct {
	mu sync.Mutex
	// quotas has one entry per policy the responses named (usually one;
	// fairgate adds one for a route group and one for each of the
	// tenant's limits), or one unnamed entry from the
	// RateLimit-Remaining/-Reset trio; at most maxQuotas, later names are
	// not paced by. A policy missing from a later response keeps its
	// state until its reset passes.
	quotas []quota
	// routes are the routes whose responses said which quotas are
	// theirs: named some, or succeeded naming none.
	routes routeTable
	// named counts those responses, seq the observations of quota state.
	named int
	seq   uint64
	// ids counts the reservations.
	ids uint64
	// hold is the end of a credential-wide 429's Retry-After: no send of
	// any route before it.
	hold time.Time
}

// maxQuotas bounds the quotas of a pace: one bit each in a route's set.
const maxQuotas = 64

// reservation is a send reserved by reserve: for cancel, and for observe
// to learn from the response.
type reservation struct {
	at  time.Time
	id  uint64 // the pace's count of reservations
	key uint64
	// quotas has bit i set when the send counts against the pace's
	// quotas[i]; seq is the pace's observation count at the reservation.
	quotas uint64
	seq    uint64
	// cost is the units the send was assumed to take; guessed is set when
	// its route had no learned cost.
	cost    float64
	guessed bool
}

// reserve reserves for a request of the route key the earliest send at or
// after now that the holds and the quotas pacing that route allow, and
// reports false, reserving nothing, when that is after limit.
//
// Each quota schedules the send at its own slot, the earliest that it and
// the holds on it allow, and spaces the next send from there: an export
// waiting for its group's refill does not push the tenant's later GETs
// behind it. Its units are counted against every quota from now.
func (p *pace) reserve(now, limit time.Time, key uint64) (reservation, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	res := reservation{at: later(now, p.hold), key: key, seq: p.seq, cost: 1, guessed: true}
	var named uint64
	if rt := p.routes.get(key); rt != nil {
		named = rt.quotas
		if rt.cost > 0 {
			res.cost, res.guessed = rt.cost, false
		}
		res.at = later(res.at, rt.hold)
	}
	for i := range p.quotas {
		if q, bit := &p.quotas[i], uint64(1)<<i; !q.partial || named&bit != 0 {
			res.quotas |= bit
			res.at = later(res.at, p.slotLocked(q, now, res.cost))
		}
	}
	if res.at.After(limit) {
		return res, false
	}
	p.ids++
	res.id = p.ids
	for i := range p.quotas {
		if q := &p.quotas[i]; res.quotas&(1<<i) != 0 {
			q.count(&res, p.slotLocked(q, now, res.cost))
		}
	}
	return res, true
}

// slotLocked returns q's own slot at now for a send of c units: the
// earliest q and the holds on it allow. Expects p.mu held.
func (p *pace) slotLocked(q *quota, now time.Time, c float64) time.Time {
	return later(later(later(now, p.hold), q.hold), q.earliest(now, c))
}

// cancel gives back a reservation whose request was never sent.
func (p *pace) cancel(res reservation) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.quotas {
		if res.quotas&(1<<i) != 0 {
			p.quotas[i].uncount(&res)
		}
	}
}

// observe updates p from the headers of the response at now to the
// request res reserved: the state of the quotas it reports, the cost of a
// request of its route, the quotas that pace the route. A 429 teaches no
// cost from the fall of r (fairgate takes no tokens for it), only from
// its Retry-After (see learnRefusedLocked), and holds sends until its
// Retry-After (ra): only the routes the refusing quota paces when its
// reason says a group or limit refused it (see scopedReason), every
// route otherwise.
func (p *pace) observe(now time.Time, h http.Header, status int, ra time.Duration, reason string, res reservation) {
	rejected := status == http.StatusTooManyRequests
	p.mu.Lock()
	defer p.mu.Unlock()
	named, reported := p.readLocked(now, h, !rejected, &res)
	// A success that names no quota says its route has none: no quota
	// paces every route then.
	if named != 0 || status < 400 {
		for i := range p.quotas {
			if named&(1<<i) == 0 {
				p.quotas[i].partial = true
			}
		}
		p.routes.add(res.key).quotas |= named
		p.named++
	}
	if !rejected || ra <= 0 {
		return
	}
	if bucketReason(reason) {
		p.learnRefusedLocked(now, reported, ra, res.key)
	}
	until := now.Add(ra)
	switch {
	case !scopedReason(reason):
		p.hold = later(p.hold, until)
	case reported != 0:
		for i := range p.quotas {
			if reported&(1<<i) != 0 {
				p.quotas[i].hold = later(p.quotas[i].hold, until)
				// A group's bucket is of its routes alone, even when no
				// other route has answered yet: a route not seen is not
				// held by it.
				p.quotas[i].partial = p.quotas[i].partial || reason == "group_quota"
			}
		}
	default:
		rt := p.routes.add(res.key)
		rt.hold = later(rt.hold, until)
	}
}

// learnRefusedLocked learns from a token bucket's 429 at now, whose
// RateLimit field reported the quotas reported, the cost of a request of
// the route key: what the refusing bucket holds once the Retry-After ra
// has passed, since fairgate's Retry-After is the time until the cost is
// back in it (the drop of r teaches nothing here: a refused request takes
// no tokens). Without it, a route whose cost is not learned yet would be
// paced as costing 1, sent as soon as one unit is back, and refused
// again. The estimate errs high (r is rounded down, the Retry-After up to
// whole seconds), which later drops of r correct; a Retry-After under
// minRefusedWait teaches nothing, as its rounding could be most of it.
// Expects p.mu held.
func (p *pace) learnRefusedLocked(now time.Time, reported uint64, ra time.Duration, key uint64) {
	if ra < minRefusedWait {
		return
	}
	c := 0.0
	for i := range p.quotas {
		if q := &p.quotas[i]; reported&(1<<i) != 0 && q.at.Equal(now) && q.rate > 0 {
			back := q.r + 1 + ra.Seconds()*q.rate
			if q.limit > 0 {
				back = min(back, q.limit)
			}
			c = max(c, back)
		}
	}
	if rt := p.routes.get(key); c > 0 && rt != nil && c > rt.cost {
		rt.cost = c
	}
}

// minRefusedWait is the shortest Retry-After a 429 teaches a cost from.
const minRefusedWait = 2 * time.Second

// bucketReason reports whether a 429's reason says that one of fairgate's
// token buckets refused it, so that its Retry-After is the time until the
// request's cost is back in the bucket.
func bucketReason(reason string) bool {
	return reason == "tenant_quota" || scopedReason(reason)
}

// scopedReason reports whether a 429's reason says that a quota of some
// routes refused it: fairgate's group_quota (a route group's bucket) and
// limit_quota (one of the tenant's limits). Every other 429 —
// tenant_quota, max_concurrent, a reason this package does not know, or
// none — holds every request of the credential.
func scopedReason(reason string) bool {
	return reason == "group_quota" || reason == "limit_quota"
}

// readLocked reads the quotas of h into p, learning costs when learn is
// set, and returns the set of quotas the response named (by the RateLimit
// field, RateLimit-Policy or the trio) and the set the RateLimit field
// reported. Expects p.mu held.
func (p *pace) readLocked(now time.Time, h http.Header, learn bool, res *reservation) (named, reported uint64) {
	if vals := h[hdrRateLimit]; len(vals) > 0 {
		p.seq++
		eachItem(vals, "r", "t", func(name string, r, t float64, okR, okT bool) {
			i := p.quotaLocked(name)
			if i < 0 {
				return
			}
			named |= 1 << i
			reported |= 1 << i
			if okR && okT {
				p.setLocked(i, now, r, t, learn, res)
			}
		})
	}
	// The policies name the quotas too, also on an answer without their
	// state (fairgate's, when its shared store failed open).
	if pols := h[hdrRateLimitPolicy]; len(pols) > 0 {
		eachItem(pols, "q", "w", func(name string, lim, w float64, okQ, okW bool) {
			i := p.quotaLocked(name)
			if i < 0 {
				return
			}
			named |= 1 << i
			if q := &p.quotas[i]; okQ {
				q.limit = lim
				if okW && w > 0 {
					q.rate = lim / w
				}
			}
		})
	}
	if named != 0 {
		return named, reported
	}
	// The trio: one unnamed quota, no known refill.
	r, okR := leadingNumber(h.Get(hdrRateLimitRemaining))
	t, okT := leadingNumber(h.Get(hdrRateLimitReset))
	if !okR || !okT {
		return 0, 0
	}
	if t > 1e9 { // a Unix time, as some servers send
		t = max(t-float64(now.Unix()), 0)
	}
	i := p.quotaLocked("")
	if i < 0 {
		return 0, 0
	}
	p.seq++
	if lim, ok := leadingNumber(h.Get(hdrRateLimitLimit)); ok {
		p.quotas[i].limit = lim
	}
	p.setLocked(i, now, r, t, learn, res)
	return 1 << i, 0
}

// setLocked sets quota i from r and t observed at now, first learning,
// when learn is set and the drop tells it, the cost of a request of the
// route it tells. Expects p.mu held.
func (p *pace) setLocked(i int, now time.Time, r, t float64, learn bool, res *reservation) {
	q := &p.quotas[i]
	if learn {
		if key, c, ok := q.sample(now, r, res, 1<<i); ok {
			p.routes.add(key).learn(c, q.limit)
		}
	}
	q.set(now, r, t, p.seq)
}

// quotaLocked returns the index of the quota named name, adding it when
// new (with the name copied, so that it does not pin the header), or -1
// when p has maxQuotas already. A quota added after the first response
// that named any is partial. Expects p.mu held.
func (p *pace) quotaLocked(name string) int {
	for i := range p.quotas {
		if p.quotas[i].name == name {
			return i
		}
	}
	if len(p.quotas) >= maxQuotas {
		return -1
	}
	p.quotas = append(p.quotas, quota{name: strings.Clone(name), partial: p.named > 0})
	return len(p.quotas) - 1
}

// idle reports whether p constrains nothing at now, so it may be dropped.
func (p *pace) idle(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold.After(now) {
		return false
	}
	for i := range p.quotas {
		q := &p.quotas[i]
		if q.hold.After(now) || q.last.After(now) || !q.earliest(now, 1).IsZero() {
			return false
		}
	}
	busy := false
	p.routes.each(func(r *route) { busy = busy || r.hold.After(now) })
	return !busy
}
