package fairshare

import (
	"math"
	"time"
)

// BackstopLimit is the global backstop's capacity: Rate tokens a second up
// to Burst, shared fairly by the tenants active over the last Window or so.
type BackstopLimit struct {
	Rate  float64 // tokens a second, > 0
	Burst float64 // tokens, > 0
	// Window is the time constant of the tenants' decayed rates: how far
	// back "recent use" looks. Must be > 0.
	Window time.Duration
}

// tau is Window in seconds.
func (l BackstopLimit) tau() float64 { return l.Window.Seconds() }

// Backstop is a fair global token bucket. One bucket of Rate and Burst
// bounds what all tenants together are admitted; who is refused when it is
// empty is decided by fair share, not by who came first:
//
//   - a tenant whose recently admitted rate is within its fair share (the
//     weighted max-min share of ShareOf × Rate among the tenants' recent
//     demands) is
//     admitted while the bucket holds more than −Burst: the lower half of
//     the bucket's range is kept for tenants within their share, so they
//     are never refused because another tenant emptied it;
//   - a tenant above its share is admitted only while the bucket holds the
//     cost (≥ 0 after the take), so it takes what the others leave
//     (work-conserving) and absorbs every refusal; and within such a
//     tenant the least important go first: a default request must leave
//     a quarter of Burst, a sheddable one half (Class).
//
// Tenants within their shares use no more than ShareOf × Rate between them,
// so the reserve refills while they use it and the bucket stays within
// [−Burst, Burst]: the admitted rate averages Rate at most, as a plain
// bucket's does. The last tenth of Rate goes first-come to tenants above
// their shares; it is what refills the reserve when every tenant is at its
// share.
//
// The zero value is an empty backstop (full bucket, no tenants). Not safe
// for concurrent use.
type Backstop struct {
	tokens  float64
	last    int64
	started bool
	level   float64 // λ, tokens a second per unit of weight; +Inf: nobody above share
	weights float64 // Σ weights of the tenants counted at levelAt
	levelAt int64
	tenants map[string]*backstopTenant
	scratch []Demand
}

type backstopTenant struct {
	demand   Rate // tokens a second asked for
	admitted Rate // tokens a second taken
	weight   float64
	// owed is what the tenant's settlements charged beyond what the
	// bucket could give it (see Settle): paid before its next take.
	owed float64
}

// BackstopResult is the Backstop's answer for one take.
type BackstopResult struct {
	Allowed bool
	// WithinShare reports whether the tenant's recent admitted rate was
	// within its fair share when it asked.
	WithinShare bool
	// Use is the tenant's recent admitted rate, Share its fair share, in
	// tokens a second (Share is Rate when nobody is above its share).
	Use, Share float64
	// Tokens is what the bucket holds after the take; negative while
	// tenants within their share are using the reserve.
	Tokens float64
	// RetryAfter is, when refused, the earliest the tenant could be
	// admitted: the bucket holds the cost again, or its rate has decayed
	// into its share.
	RetryAfter time.Duration
}

// Class orders an above-share tenant's requests at the backstop: when the
// bucket runs low, its sheddable requests are refused first, then its
// default ones, its critical ones last.
type Class uint8

const (
	// Critical requests of an above-share tenant may empty the bucket.
	Critical Class = iota
	// Default requests must leave a quarter of Burst.
	Default
	// Sheddable requests must leave half of Burst.
	Sheddable
)

// BackstopRequest is one request at the backstop.
type BackstopRequest struct {
	Tenant string
	// Weight is the tenant's weight in the fair shares; > 0.
	Weight float64
	// Cost is the request's cost in tokens; > 0.
	Cost float64
	// Class orders the tenant's requests when it is above its share.
	Class Class
}

// floorFor is how many tokens a request must leave in a bucket of range
// burst: −burst (the reserve) within its share, Class quarters of burst
// above it.
func floorFor(burst float64, within bool, c Class) float64 {
	if within {
		return -burst
	}
	return float64(min(c, Sheddable)) * burst / 4
}

// LevelEvery is how often, in fractions of Window, the fair level is
// recomputed from every tenant's demand; while the top of the bucket is
// empty and nobody was above share at the last count, at every take (the
// demands lag a sudden flood).
const LevelEvery = 50

// ShareOf is the fraction of Rate divided into fair shares.
const ShareOf = 0.9

// Take decides request r at now.
func (b *Backstop) Take(now int64, l BackstopLimit, r BackstopRequest) BackstopResult {
	tenant, weight, cost := r.Tenant, r.Weight, r.Cost
	tau := l.tau()
	if !b.started {
		b.started, b.tokens, b.last, b.level = true, l.Burst, now, math.Inf(1)
		b.tenants = make(map[string]*backstopTenant)
	}
	if now > b.last {
		b.tokens = min(l.Burst, b.tokens+float64(now-b.last)/1e9*l.Rate)
		b.last = now
	}
	t := b.tenants[tenant]
	if t == nil {
		t = &backstopTenant{}
		b.tenants[tenant] = t
	}
	t.weight = weight
	t.demand.Add(now, tau, cost)
	if now-b.levelAt >= int64(l.Window)/LevelEvery || now < b.levelAt || b.tokens < cost && math.IsInf(b.level, 1) {
		b.recompute(now, l)
	}
	use, share := t.admitted.At(now, tau), ShareFor(l, b.level, b.weights, weight)
	var res BackstopResult
	b.tokens, t.owed, res = JudgeOwing(l, l.Burst, b.tokens, t.owed, use, share, r)
	if res.Allowed {
		b.tokens -= cost
		t.admitted.Add(now, tau, cost)
	}
	res.Tokens = b.tokens
	return res
}

// JudgeOwing is Judge for a tenant that owes owed tokens of settlements
// (Settle): it first pays what the bucket holds above the tenant's floor
// (a critical take's: −burst within its share, 0 above it), then judges
// the request with what is still owed added to its cost, so that a tenant
// in debt is refused until the refill has paid it, with a RetryAfter that
// says when. It returns the bucket's tokens and the debt after paying,
// before any take (the caller takes r.Cost when Allowed).
func JudgeOwing(l BackstopLimit, burst, tokens, owed, use, share float64, r BackstopRequest) (float64, float64, BackstopResult) {
	if owed > 0 {
		pay := min(owed, max(tokens-floorFor(burst, use < share, Critical), 0))
		tokens, owed = tokens-pay, owed-pay
	}
	if owed <= 0 {
		return tokens, 0, Judge(l, burst, tokens, use, share, r)
	}
	// Refused: the bucket holds nothing above the floor. It is repaid
	// when the refill has brought the debt and the cost above the floor
	// of the tenant's standing now (its rate decaying into its share may
	// let it in sooner, from the reserve, but not always: not told).
	res := BackstopResult{Use: use, Share: share, WithinShare: use < share, Tokens: tokens}
	wait := (r.Cost + owed + floorFor(burst, res.WithinShare, r.Class) - tokens) / l.Rate
	res.RetryAfter = time.Duration(math.Ceil(max(wait, 0) * 1e9))
	return tokens, owed, res
}

// Settle applies a settled request's usage-based cost (signed: what it
// used less what it reserved at Take) at now. The tenant's demand and
// admitted rates count the difference, never below zero, so that its
// fair-share standing is by what it used; then the bucket is charged
// (SettleOwing): what it holds above the floor of the tenant's standing,
// the rest owed by the tenant, which its next takes pay first
// (JudgeOwing), or refunded, what it owes first. A tenant it no longer
// remembers is not made again (only the bucket is settled); a cost of
// zero changes nothing.
func (b *Backstop) Settle(now int64, l BackstopLimit, tenant string, cost float64) {
	if !b.started || cost == 0 {
		return
	}
	if now > b.last {
		b.tokens = min(l.Burst, b.tokens+float64(now-b.last)/1e9*l.Rate)
		b.last = now
	}
	t := b.tenants[tenant]
	if t == nil {
		b.tokens, _ = SettleOwing(b.tokens, l.Burst, 0, cost, false)
		return
	}
	tau := l.tau()
	t.demand.Add(now, tau, cost)
	t.admitted.Add(now, tau, cost)
	t.demand.v, t.admitted.v = max(t.demand.v, 0), max(t.admitted.v, 0)
	within := t.admitted.At(now, tau) < ShareFor(l, b.level, b.weights, t.weight)
	b.tokens, t.owed = SettleOwing(b.tokens, l.Burst, t.owed, cost, within)
}

// SettleOwing settles cost (signed) for a tenant within its fair share
// or not (by its rates with the cost counted) that owes owed, at a bucket
// of range burst holding tokens, and returns the bucket's tokens and the
// tenant's debt. A charge takes what the bucket holds above the floor a
// critical take of the tenant would have to leave (−burst within its
// share, 0 above it) and adds the rest to the debt; a refund pays the
// debt first, then fills the bucket, no higher than burst. The bucket is
// everyone's: a settlement never takes from the reserve of the tenants
// within their shares what the tenant could not have taken.
func SettleOwing(tokens, burst, owed, cost float64, within bool) (float64, float64) {
	if cost > 0 {
		take := min(cost, max(tokens-floorFor(burst, within, Critical), 0))
		return tokens - take, owed + cost - take
	}
	paid := min(owed, -cost)
	return min(tokens-cost-paid, burst), owed - paid
}

// ShareFor is the fair share of a tenant of weight at level λ (the
// weighted max-min level of ShareOf × Rate among the demands, over
// tenants whose weights sum to weights): level × weight, or while nobody
// is above share (level +Inf) an even split of ShareOf × Rate. The
// demands lag a flood that has just begun: until they show it, the
// reserve is for tenants within an even split.
func ShareFor(l BackstopLimit, level, weights, weight float64) float64 {
	if share := level * weight; !math.IsInf(share, 1) {
		return share
	}
	return ShareOf * l.Rate * weight / max(weights, weight)
}

// Judge applies the backstop's rule to request r of a tenant whose recent
// admitted rate is use and whose fair share is share, at a bucket that
// holds tokens and whose range is burst (l.Burst for the one bucket; an
// instance deciding on its part of a shared bucket passes its part): a
// tenant within its share may take the bucket down to −burst, one above it
// only down to its class's floor. It does not take: when Allowed, the
// caller takes r.Cost from the bucket and counts it as admitted. Tokens
// is what the bucket holds after the take.
func Judge(l BackstopLimit, burst, tokens, use, share float64, r BackstopRequest) BackstopResult {
	res := BackstopResult{Use: use, Share: share, WithinShare: use < share, Tokens: tokens}
	floor := floorFor(burst, res.WithinShare, r.Class)
	if tokens-r.Cost >= floor {
		res.Allowed = true
		res.Tokens -= r.Cost
		return res
	}
	wait := (r.Cost + floor - tokens) / l.Rate
	if !res.WithinShare && share > 0 {
		// Or until its own rate has decayed into its share.
		wait = min(wait, l.tau()*math.Log(use/share))
	}
	res.RetryAfter = time.Duration(math.Ceil(max(wait, 0) * 1e9))
	return res
}

// recompute sets the fair level from every tenant's demand at now and
// forgets the tenants whose demand has decayed to nothing.
func (b *Backstop) recompute(now int64, l BackstopLimit) {
	tau := l.tau()
	ds := b.scratch[:0]
	b.weights = 0
	for id, t := range b.tenants {
		d := t.demand.advance(now, tau)
		if d < l.Rate*1e-6 {
			delete(b.tenants, id)
			continue
		}
		ds = append(ds, Demand{Use: d, Weight: t.weight})
		b.weights += t.weight
	}
	b.level = Level(ShareOf*l.Rate, ds)
	b.levelAt = now
	b.scratch = ds[:0]
}

// Tenants reports how many tenants the backstop remembers.
func (b *Backstop) Tenants() int { return len(b.tenants) }

// Level reports the fair level λ last computed (+Inf: nobody above share).
func (b *Backstop) Level() float64 {
	if !b.started {
		return math.Inf(1)
	}
	return b.level
}
