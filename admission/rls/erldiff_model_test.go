package rls_test

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// This file classifies each field of a call on which the two services
// differ. A difference is documented when fairgate's value is what the
// model predicts: ERL's semantics (the tree, matching, replaces,
// unlimited, overrides, shadow codes, quota_mode, which descriptor the
// headers describe) with only the differences docs/envoy.md states
// (erlDocumented) applied — token buckets for fixed windows, a request
// charged all or nothing, checks, and the rest — and each such field is
// put down to the ones that explain it. The model keeps each bucket's
// tokens as an interval [lo, hi] that widens by what the calls' timing
// lets refill and narrows to what fairgate reports, so that refill is
// classified (as refill), not hidden by a tolerance on every field.
//
// Where others are changing fairgate now, the model holds each reading
// as a variant (variant) and follows the one fairgate's answer fits; a
// reading the doc does not state carries a note (pred.undoc) and makes
// the field undocumented, while the model still follows it so that one
// difference does not cascade into every later call.

// diff is one field of one call whose answers differ.
type diff struct {
	field, erl, fg string
	// reasons are the documented differences that explain it; none means
	// undocumented.
	reasons []string
	note    string // why undocumented, or what the model says
}

// pred is the model's prediction of one field of fairgate's answer.
type pred struct {
	want    string
	ok      func(v string) bool
	reasons []string
	// why, when set, gives the reasons for an accepted value instead.
	why func(v string) []string
	// undoc, when set, is fairgate behaviour that the model follows but
	// that docs/envoy.md does not state: a field it explains is
	// undocumented, with this note.
	undoc string
	// follows says the field follows the statuses (the overall code, the
	// headers): its reasons are those of the status fields that differ.
	follows bool
	// miss explains a value the prediction does not accept.
	miss func(v string) string
	// alts are the alternatives of a oneOf: the first that accepts a
	// value explains it.
	alts []pred
}

func exact(v string, reasons ...string) pred {
	return pred{want: v, ok: func(s string) bool { return s == v }, reasons: reasons}
}

func undoc(v, note string) pred {
	p := exact(v)
	p.undoc = note
	return p
}

func oneOf(alts ...pred) pred {
	var wants []string
	for _, a := range alts {
		wants = append(wants, a.want)
	}
	return pred{want: strings.Join(wants, " or "), alts: alts, ok: func(s string) bool {
		return slices.ContainsFunc(alts, func(a pred) bool { return a.ok(s) })
	}}
}

// explain is the prediction that accounts for v: p, or the first of its
// alternatives that accepts v, with the reasons for v.
func (p pred) explain(v string) pred {
	for _, a := range p.alts {
		if a.ok(v) {
			return a.explain(v)
		}
	}
	if p.why != nil {
		p.reasons = p.why(v)
	}
	return p
}

// between accepts the whole tokens of an interval [lo, hi] of tokens. A
// value above the low end is tokens that came back during the sequence.
func between(lo, hi float64, reasons ...string) pred {
	a, b := int64(math.Floor(max(0, lo)+eps)), int64(math.Floor(max(0, hi)+eps))
	want := strconv.FormatInt(a, 10)
	if b > a {
		want += ".." + strconv.FormatInt(b, 10)
	}
	return pred{want: want, reasons: reasons, ok: func(s string) bool {
		n, err := strconv.ParseInt(s, 10, 64)
		return err == nil && n >= a && n <= b
	}, why: func(s string) []string {
		if n, _ := strconv.ParseInt(s, 10, 64); n > a {
			return append(slices.Clone(reasons), "refill")
		}
		return reasons
	}}
}

const eps = 1e-6

// bucket is the model's view of one fairgate token bucket.
type bucket struct {
	lo, hi       float64 // tokens now, at least and at most
	burst, rate  float64 // tokens, tokens a second
	lastB, lastA time.Time
	seen         bool
	// denied are the takes the Redis store's denial cache refuses
	// without asking Redis (by denyID), until when.
	denied map[string]time.Time
	// window is ERL's window at the first call (Unix seconds / unit); in
	// the fixed pass, fairgate's window of the last call.
	window int64
	causes map[string]bool // documented differences that made it diverge from ERL's counter
}

// refill brings b to a call made between start and end.
func (b *bucket) refill(start, end time.Time) {
	if !b.seen {
		b.lo, b.hi, b.seen = b.burst, b.burst, true
	} else {
		b.lo += b.rate * max(0, start.Sub(b.lastA).Seconds())
		b.hi += b.rate * (end.Sub(b.lastB).Seconds() + 0.002)
	}
	b.lo, b.hi = min(b.lo, b.burst), min(b.hi, b.burst)
	b.lastB, b.lastA = start, end
}

// model predicts fairgate's answers for one sequence.
type model struct {
	f            *erlFile
	globalShadow bool
	erlHeaders   bool // ERL runs with LIMIT_RESPONSE_HEADERS_ENABLED, fairgate with rls.response_headers
	// fixed: fairgate runs with rls.window: fixed (the fixed pass; see
	// erldiff_window_test.go).
	fixed   bool
	start   time.Time // when fairgate was asked the call being predicted
	end     time.Time // when it answered
	buckets map[string]*bucket
	docs    map[string]bool // documented differences docs/envoy.md still states
	// misses are the fields of the last call that both services agree on
	// and the model predicted otherwise.
	misses []string
}

func newModel(f *erlFile, globalShadow, erlHeaders bool, docs map[string]bool) *model {
	return &model{f: f, globalShadow: globalShadow, erlHeaders: erlHeaders, buckets: map[string]*bucket{}, docs: docs}
}

// kind is how a request descriptor is treated.
type kind uint8

const (
	kindNone kind = iota // not limited (or an unknown domain)
	kindUnlimited
	kindReplaced
	kindZero // requests_per_unit: 0
	kindLimited
)

// desc is one request descriptor as the model sees it.
type desc struct {
	kind         kind
	limit        *limit
	bucket       string
	shadow       bool    // for codes: its shadow_mode (ERL)
	chargeShadow bool    // fairgate takes it as a shadow descriptor (its own shadow_mode, or rls.shadow)
	hits         float64 // the hits ERL adds
	check        bool    // its own hits_addend is 0
}

func (m *model) describe(req *rlsv3.RateLimitRequest) []desc {
	known := req.Domain == m.f.Domain
	ds := make([]desc, len(req.Descriptors))
	replaced := map[string]bool{}
	for i, d := range req.Descriptors {
		var entries [][2]string
		for _, e := range d.Entries {
			entries = append(entries, [2]string{e.Key, e.Value})
		}
		x := &ds[i]
		x.hits = float64(max(1, req.HitsAddend))
		if h := d.GetHitsAddend(); h != nil {
			x.hits, x.check = float64(h.Value), h.Value == 0
		}
		if !known {
			continue
		}
		mt := m.f.erlMatch(entries)
		x.limit, x.bucket = mt.limit, mt.bucket
		if o := d.GetLimit(); o != nil {
			x.limit, x.bucket = overrideLimit(o), plainBucket(req.Domain, entries)
		}
		if x.limit == nil {
			continue
		}
		if m.fixed {
			// A window's count is per window length, as ERL's is.
			x.bucket += "@" + strconv.FormatFloat(x.limit.window, 'f', -1, 64)
		}
		for _, r := range x.limit.replaces {
			replaced[r] = true
		}
		x.shadow = x.limit.shadow
		x.chargeShadow = x.shadow || m.globalShadow
		switch {
		case x.limit.unlimited:
			x.kind = kindUnlimited
		case x.limit.rpu == 0:
			x.kind = kindZero
		default:
			x.kind = kindLimited
		}
	}
	for i := range ds {
		if x := &ds[i]; (x.kind == kindLimited || x.kind == kindZero) && x.limit.name != "" && replaced[x.limit.name] {
			x.kind = kindReplaced
		}
	}
	return ds
}

// overrideLimit is a request-level override as ERL applies it: no name, no
// shadow mode; the bucket refills over unit × unit_multiplier, as
// fairgate's does.
func overrideLimit(o *commonrl.RateLimitDescriptor_RateLimitOverride) *limit {
	u := rlsv3.RateLimitResponse_RateLimit_Unit(o.Unit)
	l := &limit{rpu: o.RequestsPerUnit, unit: u, window: unitLength(u).Seconds()}
	if mu := o.GetUnitMultiplier(); mu != nil && mu.Value > 1 {
		l.window *= float64(mu.Value)
		l.multiplied = true
	}
	return l
}

func plainBucket(domain string, entries [][2]string) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteString("|" + e[0] + "=" + e[1])
	}
	return b.String()
}

// variant is one reading of what others are changing in fairgate now.
type variant struct {
	// check is what a descriptor's hits_addend 0 does: "peek", as
	// docs/envoy.md says of both stores (it reads its bucket before the
	// request's charges, takes nothing, and is over below one token; an
	// enforced check over refuses the request, whose other descriptors
	// are not asked); "look" (OK without state, as the Redis store
	// answered before c68c8a0 and still does when Redis does not answer,
	// which this test never has it do: undocumented here); or "one" (it
	// costs 1, as the doc said before; undocumented now).
	check string
	// merged: descriptors with the same entries are one take of both
	// costs (documented); else taken in order, as ERL counts them.
	merged bool
	// shadowEnforced: when only shadow descriptors refuse, nothing is
	// charged, as enforcement would (docs/envoy.md's "taken as if
	// enforced"); else the enforced ones are charged (its "when only
	// shadow descriptors refuse, ... the enforced ones are charged").
	shadowEnforced bool
}

// take is one bucket's share of a request.
type take struct {
	b      *bucket
	key    string
	need   float64 // tokens it must find
	charge float64 // tokens it takes
	shadow bool    // every descriptor in it is a shadow one (for charging)
	lo, hi float64 // tokens before
	off    float64 // taken in order: what the earlier takes on the bucket took first
	over   bool
	paid   bool
	// check: a check's read (it charges nothing, and reads the bucket
	// before the request's charges).
	check bool
	// remembered: over only because the Redis store remembered an
	// earlier refusal of the same take (rememberedDenial).
	remembered bool
}

// candidate is one prediction of a call: per field, and what it does to
// the buckets.
type candidate struct {
	v      variant
	preds  map[string]pred
	takes  []*take
	causes map[string][]string   // bucket → documented differences this call adds
	after  map[string][2]float64 // bucket → tokens after the call
	// descBuckets are the descriptors' buckets, "" for one not taken.
	descBuckets []string
	// checkReads: the descriptor is a check that read its bucket.
	checkReads []bool
	// resets bound the descriptors' RateLimit-Reset in seconds: the
	// refill time, or for one over the time its cost takes to come.
	resets []float64
	// erlLimits are the current_limit ERL gives each status, as the
	// model reads the config.
	erlLimits []string
}

// predict lists the candidates for req, made between start and end: each
// variant, and for each take the refill may or may not have made room
// for, both outcomes.
func (m *model) predict(req *rlsv3.RateLimitRequest, start, end time.Time) []*candidate {
	ds := m.describe(req)
	m.start, m.end = start, end
	hasCheck, hasDup, hasShadow := false, false, false
	seen := map[string]bool{}
	for _, d := range ds {
		if d.kind != kindLimited {
			continue
		}
		hasCheck, hasDup, hasShadow = hasCheck || d.check, hasDup || seen[d.bucket], hasShadow || d.chargeShadow
		seen[d.bucket] = true
		b := m.buckets[d.bucket]
		if b == nil {
			b = &bucket{causes: map[string]bool{}}
			m.buckets[d.bucket] = b
		}
		burst, rate := float64(d.limit.rpu), float64(d.limit.rpu)/d.limit.window
		if b.seen && m.fixed && burst != b.burst {
			// A window counts hits: what is left moves with the limit.
			b.lo, b.hi = max(0, min(b.lo+burst-b.burst, burst)), max(0, min(b.hi+burst-b.burst, burst))
		} else if b.seen && (burst != b.burst || rate != b.rate) {
			// An override on a configured limit's bucket (or back): the
			// same tokens, a new burst and rate.
			b.causes["override-raise"] = true
			b.lo, b.hi = min(b.lo, burst), min(b.hi, burst)
		}
		if d.limit.multiplied {
			b.causes["unit-multiplier"] = true
		}
		b.burst, b.rate = burst, rate
		if b.seen && b.lastA.Equal(end) {
			continue // a second descriptor on the bucket
		}
		if m.fixed {
			b.turn(start, end, d.limit.window)
			continue
		}
		// ERL counts in windows of the unit since the epoch: one that
		// turned over since the bucket's first call restarted ERL's
		// counter, not the bucket.
		if unit := int64(unitLength(d.limit.unit) / time.Second); unit > 0 {
			w := start.Unix() / unit
			if b.seen && w != b.window {
				b.causes["window-reset"] = true
			}
			if !b.seen {
				b.window = w
			}
		}
		b.refill(start, end)
	}
	var out []*candidate
	// This test runs fairgate on its Redis store, with Redis answering: a
	// check there is "peek" as docs/envoy.md says, which goes first (a tie
	// goes to it).
	for _, check := range []string{"peek", "look", "one"} {
		if !hasCheck && check != "peek" {
			continue
		}
		for _, merged := range []bool{true, false} {
			if !hasDup && !merged {
				continue
			}
			for _, se := range []bool{false, true} {
				if !hasShadow && se {
					continue
				}
				out = append(out, m.candidates(ds, variant{check: check, merged: merged, shadowEnforced: se})...)
			}
		}
	}
	return out
}

func (m *model) candidates(ds []desc, v variant) []*candidate {
	var takes []*take
	of := make([]int, len(ds)) // descriptor → take, -1 none
	for i, d := range ds {
		of[i] = -1
		if d.kind != kindLimited || d.check && v.check == "look" {
			continue
		}
		if d.check && v.check == "peek" {
			// A check reads its bucket before anything is charged, on
			// its own: a question of one token, which takes nothing.
			b := m.buckets[d.bucket]
			of[i] = len(takes)
			takes = append(takes, &take{b: b, key: d.bucket, need: 1, shadow: d.chargeShadow, check: true, lo: b.lo, hi: b.hi})
			continue
		}
		need, charge := d.hits, d.hits
		if d.check { // "one"
			need, charge = 1, 1
		}
		if v.merged {
			if j := slices.IndexFunc(takes, func(t *take) bool { return t.key == d.bucket && !t.check }); j >= 0 {
				t := takes[j]
				t.need, t.charge = t.need+need, t.charge+charge
				t.shadow = t.shadow && d.chargeShadow
				of[i] = j
				continue
			}
		}
		b := m.buckets[d.bucket]
		of[i] = len(takes)
		takes = append(takes, &take{b: b, key: d.bucket, need: need, charge: charge, shadow: d.chargeShadow, lo: b.lo, hi: b.hi})
	}
	if !v.merged { // each take sees the earlier ones' charges on its bucket (a check reads before them all)
		spent := map[string]float64{}
		for _, t := range takes {
			if t.check {
				continue
			}
			t.off = spent[t.key]
			t.lo, t.hi = t.lo-t.off, t.hi-t.off
			spent[t.key] += t.charge
		}
	}
	// The takes the refill may or may not have made room for: the checks
	// first, which decide whether the others are asked at all.
	var unsure []int
	for _, checks := range []bool{true, false} {
		for j, t := range takes {
			if t.check == checks && t.lo+eps < t.need && t.hi+eps >= t.need && len(unsure) < 4 {
				unsure = append(unsure, j)
			}
		}
	}
	var charged []int // the takes that charge
	for j, t := range takes {
		if !t.check {
			charged = append(charged, j)
		}
	}
	remembered := len(charged) == 1 && len(unsure) == 0 && m.rememberedDenial(takes[charged[0]])
	var out []*candidate
	for mask := 0; mask < 1<<len(unsure); mask++ {
		ts := make([]*take, len(takes))
		for j, t := range takes {
			c := *t
			c.over = c.hi+eps < c.need
			if k := slices.Index(unsure, j); k >= 0 {
				if c.over = mask&(1<<k) == 0; c.over {
					c.hi = min(c.hi, c.need-eps)
				} else {
					c.lo = max(c.lo, c.need)
				}
			}
			ts[j] = &c
		}
		block := m.block(ds, ts, of)
		if block == "" {
			out = append(out, m.render(ds, v, block, ts, of))
			continue
		}
		// Refused before any charge: only the checks were asked (their
		// reads); each outcome of the other takes is the same answer.
		if slices.ContainsFunc(unsure, func(j int) bool { return !takes[j].check && mask&(1<<slices.Index(unsure, j)) != 0 }) {
			continue
		}
		asked, at := []*take(nil), make([]int, len(ds))
		for i := range ds {
			at[i] = -1
			if of[i] >= 0 && ts[of[i]].check {
				at[i] = len(asked)
				asked = append(asked, ts[of[i]])
			}
		}
		out = append(out, m.render(ds, v, block, asked, at))
	}
	if remembered {
		ts := make([]*take, len(takes))
		for j, t := range takes {
			c := *t
			c.over = c.hi+eps < c.need
			ts[j] = &c
		}
		if m.block(ds, ts, of) == "" {
			ts[charged[0]].over, ts[charged[0]].remembered = true, true
			out = append(out, m.render(ds, v, "", ts, of))
		}
	}
	return out
}

// block is why the request is refused before anything is charged, by the
// refusal rule (a descriptor that is no quota is over, or every quota is)
// applied to what is known then: an enforced limit of zero, and the checks
// read (ts, the takes of the descriptors by of); "" when it is not. A
// descriptor's own shadow_mode exempts it; under rls.shadow the request is
// still refused as enforcement would refuse it. Its reason is
// "zero-limit" or "check-over".
func (m *model) block(ds []desc, ts []*take, of []int) string {
	why := ""
	refuse := func(d desc) {
		if why != "zero-limit" {
			why = "check-over"
			if d.kind == kindZero {
				why = "zero-limit"
			}
		}
	}
	quotas, quotasOver := 0, 0
	var quotaOver []desc
	for i, d := range ds {
		if d.kind != kindLimited && d.kind != kindZero {
			continue
		}
		over := d.kind == kindZero || of[i] >= 0 && ts[of[i]].check && ts[of[i]].over
		switch {
		case d.limit.quota:
			quotas++
			if over && !d.shadow {
				quotasOver++
				quotaOver = append(quotaOver, d)
			}
		case over && !d.shadow:
			refuse(d)
		}
	}
	if why == "" && quotas > 0 && quotasOver == quotas {
		for _, d := range quotaOver {
			refuse(d)
		}
	}
	return why
}

// denyID names a take as the Redis store's denial cache does: its limit
// (the bucket's rate now) and cost.
func denyID(b *bucket, cost float64) string {
	return strconv.FormatFloat(b.burst, 'g', -1, 64) + "/" + strconv.FormatFloat(b.rate, 'g', -1, 64) + "/" + strconv.FormatFloat(cost, 'g', -1, 64)
}

// rememberedDenial reports whether the Redis store may refuse t, a
// request's one take, from its denial cache though the bucket holds the
// cost: the same take was refused (or left less than its cost) within
// the wait it was told, and the bucket, shared by two limits, may since
// have refilled faster under the other one.
func (m *model) rememberedDenial(t *take) bool {
	until, ok := t.b.denied[denyID(t.b, t.need)]
	return !m.fixed && ok && m.start.Before(until) && t.b.causes["override-raise"] && t.lo+eps >= t.need
}

// remember notes what the Redis store's denial cache keeps of c, a call
// of one take: a refusal, or an admission that left less than the cost,
// is remembered until the refill at the take's rate brings the cost
// (counted from its latest possible tokens' lowest).
func (m *model) remember(c *candidate) {
	// A check's read is no take: the charge beside it is one take.
	ts := slices.DeleteFunc(slices.Clone(c.takes), func(t *take) bool { return t.check })
	if len(ts) != 1 || m.fixed {
		return
	}
	t := ts[0]
	b := t.b
	if b.rate <= 0 || t.remembered {
		return
	}
	if b.denied == nil {
		b.denied = map[string]time.Time{}
	}
	id := denyID(b, t.need)
	left := t.lo
	if t.paid {
		left = c.after[t.key][0]
	}
	if !t.over && left+eps >= t.need {
		delete(b.denied, id)
		return
	}
	b.denied[id] = m.end.Add(time.Duration((t.need - max(0, left)) / b.rate * float64(time.Second)))
}

// Notes of fairgate behaviour the model follows but the doc does not
// state.
const (
	noteCheckCharged = "a hits_addend 0 descriptor took a token (docs/envoy.md: a check charges nothing)"
	noteCheckLook    = "a check answered OK without state while Redis answered (docs/envoy.md: a check reads its bucket on both stores)"
	noteOverNoLimit  = "an OVER_LIMIT status without current_limit (docs/envoy.md: an OVER_LIMIT one always carries it)"
	noteOverTokens   = "an OVER_LIMIT status with its bucket's tokens as limit_remaining (docs/envoy.md: 0)"
	noteHeadersOff   = "fairgate sends response headers with rls.response_headers off"
)

// render is a candidate's answer for one set of take outcomes.
//
// block, when set, is why the request was refused before any charge
// (model.block): ts are then only the checks' reads.
func (m *model) render(ds []desc, v variant, block string, ts []*take, of []int) *candidate {
	c := &candidate{v: v, preds: map[string]pred{}, takes: ts, causes: map[string][]string{}, after: map[string][2]float64{}}
	blocked := block != ""
	// A check's read decides the request only before the charges
	// (block); the charges are all or nothing among themselves.
	enforcedOver, shadowOver := false, false
	for _, t := range ts {
		enforcedOver = enforcedOver || t.over && !t.shadow && !t.check
		shadowOver = shadowOver || t.over && t.shadow && !t.check
	}
	refused := enforcedOver || shadowOver && v.shadowEnforced
	for _, t := range ts {
		switch {
		case t.check:
			t.paid = true // read, whatever the charges did; it takes nothing
		case refused:
		case shadowOver:
			t.paid = !t.shadow
		default:
			t.paid = true
		}
	}
	// Why each bucket now differs from ERL's counter, which adds every
	// limited descriptor's hits, always.
	shadowCause := "shadow-taken"
	if v.shadowEnforced {
		shadowCause = "shadow-enforced"
	}
	if m.globalShadow {
		shadowCause = "global-shadow"
	}
	notCharged := "all-or-nothing" // why a descriptor with room was not charged
	switch {
	case blocked:
		notCharged = block
	case !enforcedOver && shadowOver:
		notCharged = shadowCause
	}
	for i, d := range ds {
		if d.kind != kindLimited {
			continue
		}
		why := ""
		if of[i] < 0 {
			if blocked && d.hits > 0 {
				why = block
			}
		} else if t := ts[of[i]]; t.paid {
			if d.check && v.check == "one" {
				why = "check-charged"
			}
		} else if d.hits > 0 {
			why = notCharged
			if t.over {
				why = "refused-free"
			}
		}
		if why != "" {
			c.causes[d.bucket] = append(c.causes[d.bucket], why)
		}
	}
	paid := map[string]float64{}
	for _, t := range ts {
		if t.paid {
			paid[t.key] += t.charge
		}
	}
	for _, t := range ts {
		lohi, ok := c.after[t.key]
		if !ok {
			lohi = [2]float64{math.Inf(-1), math.Inf(1)}
		}
		c.after[t.key] = [2]float64{max(lohi[0], t.lo+t.off), min(lohi[1], t.hi+t.off)}
	}
	for key, lohi := range c.after {
		c.after[key] = [2]float64{lohi[0] - paid[key], lohi[1] - paid[key]}
	}
	c.descBuckets, c.resets, c.erlLimits = make([]string, len(ds)), make([]float64, len(ds)), make([]string, len(ds))
	c.checkReads = make([]bool, len(ds))
	for i, d := range ds {
		c.erlLimits[i] = "-"
		if d.limit != nil {
			c.resets[i] = d.limit.window
			if d.kind == kindLimited || d.kind == kindZero {
				c.erlLimits[i] = d.limit.String()
			}
		}
		if of[i] >= 0 {
			c.descBuckets[i] = ts[of[i]].key
			c.checkReads[i] = ts[of[i]].check
		}
	}

	// The overall code is OVER_LIMIT when a descriptor that is no quota
	// is, or when every quota descriptor is (ERL's quota_mode).
	overall := rlsv3.RateLimitResponse_OK
	quotas, quotasOver := 0, 0
	for _, d := range ds {
		if (d.kind == kindLimited || d.kind == kindZero) && d.limit.quota {
			quotas++
		}
	}
	markOver := func(d desc) {
		if d.limit.quota {
			quotasOver++
		} else {
			overall = rlsv3.RateLimitResponse_OVER_LIMIT
		}
	}
	const ok, over = "OK", "OVER_LIMIT"
	for i, d := range ds {
		p := "status[" + strconv.Itoa(i) + "]."
		set := func(code, lim, rem pred) {
			c.preds[p+"code"], c.preds[p+"current_limit"], c.preds[p+"limit_remaining"] = code, lim, rem
			if !m.fixed {
				return
			}
			reset, why := "-", []string(nil)
			if d.limit != nil {
				reset = windowReset(d.limit, m.start)
				if d.limit.multiplied {
					why = []string{"unit-multiplier"}
				}
			}
			c.preds[p+"duration_until_reset"] = resetPred(lim, reset, why...)
		}
		switch {
		case d.kind == kindNone || d.kind == kindReplaced:
			set(exact(ok), exact("-"), exact("0"))
			continue
		case d.kind == kindUnlimited:
			set(exact(ok), exact("-"), exact(strconv.FormatUint(math.MaxUint32, 10)))
			continue
		case d.kind == kindZero:
			code := exact(ok)
			if !d.shadow {
				code = exact(over)
				markOver(d)
			}
			set(code, exact(d.limit.String()), exact("0"))
			continue
		}
		// This call's own refusal changes only later figures (ERL says
		// 0 when over, counted or not).
		now := slices.DeleteFunc(slices.Clone(c.causes[d.bucket]), func(s string) bool { return s == "refused-free" })
		reasons := m.bucketReasons(d.bucket, now)
		if d.check {
			reasons = append(reasons, "checks")
		}
		lim := exact(d.limit.String(), reasons...)
		if of[i] < 0 && d.check { // "look": a check that read nothing
			set(undoc(ok, noteCheckLook), undoc("-", noteCheckLook), undoc("0", noteCheckLook))
			continue
		}
		if of[i] < 0 { // a zero limit or a check refused the request first: not asked
			b := m.buckets[d.bucket]
			set(exact(ok, reasons...), oneOf(exact("-", block), lim), oneOf(exact("0", block), between(b.lo, b.hi, reasons...)))
			continue
		}
		t := ts[of[i]]
		// Merged with another descriptor of the same entries, its code
		// is the pair's: over when their costs together are.
		shared := v.merged && (slices.Index(of, of[i]) != i || slices.Contains(of[i+1:], of[i]))
		if t.remembered {
			reasons = append(reasons, "remembered-denial")
		}
		codeWhy := reasons
		if shared {
			codeWhy = append(slices.Clone(reasons), "same-entries")
		}
		code := exact(ok, codeWhy...)
		if t.over && !d.shadow {
			code = exact(over, codeWhy...)
			markOver(d)
		}
		lohi := c.after[t.key]
		var rem pred
		switch {
		case t.check: // read before the charges
			rem = between(t.lo, t.hi, reasons...)
		case !v.merged: // taken in order: each status sees the bucket after its own take
			lo, hi := t.lo+t.off, t.hi+t.off
			if t.paid {
				lo, hi = t.lo-t.charge, t.hi-t.charge
			}
			rem = between(lo, hi, reasons...)
		case shared:
			rem = between(lohi[0], lohi[1], codeWhy...)
		default:
			rem = between(lohi[0], lohi[1], reasons...)
		}
		switch {
		case t.over:
			// Over, fairgate answers what ERL does: the limit and 0.
			if t.b.rate > 0 {
				// RateLimit-Reset: when the bucket holds the cost, which
				// may be longer than a window (or never, past the burst).
				c.resets[i] = max(c.resets[i], t.need/t.b.rate)
			}
			lim = oneOf(lim, undoc("-", noteOverNoLimit))
			tokens := rem
			tokens.undoc = noteOverTokens
			rem = oneOf(exact("0", reasons...), tokens)
		case !t.paid:
			// Refused by another descriptor: a bare OK (not charged),
			// or the bucket's state.
			lim = oneOf(exact("-", notCharged), lim)
			rem = oneOf(exact("0", notCharged), rem)
		}
		set(code, lim, rem)
	}
	if quotas > 0 && quotas == quotasOver {
		overall = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	if m.globalShadow {
		overall = rlsv3.RateLimitResponse_OK
	}
	op := exact(overall.String(), m.shape()...)
	op.follows = true
	c.preds["overall"] = op
	return c
}

// bucketReasons are why a bucket's figures differ from ERL's counter:
// what diverged it before and now, else that it is a token bucket.
func (m *model) bucketReasons(key string, now []string) []string {
	var r []string
	if b := m.buckets[key]; b != nil {
		for c := range b.causes {
			r = append(r, c)
		}
	}
	r = append(r, now...)
	if len(r) == 0 {
		r = m.shape()
	}
	slices.Sort(r)
	return slices.Compact(r)
}

// classify compares one call's answers. It picks the candidate that
// explains most of fairgate's fields, classifies each field that differs
// from ERL's, and moves the buckets on by that candidate, narrowed to what
// fairgate reported (or reset to it, after a figure the model could not
// explain, so that one difference does not cascade).
func (m *model) classify(req *rlsv3.RateLimitRequest, erl, fg fields, start, end time.Time) []diff {
	if _, e := erl["error"]; e || fg["error"] != "" {
		return m.classifyError(req, erl, fg)
	}
	var best *candidate
	bestMiss := -1
	for _, c := range m.predict(req, start, end) {
		miss := 0
		for k, p := range c.preds {
			if v := orAbsent(fg, k); !p.ok(v) {
				miss += 2
			} else if p.explain(v).undoc != "" {
				miss++ // a documented reading explains better
			}
		}
		if best == nil || miss < bestMiss {
			best, bestMiss = c, miss
		}
	}
	// The limits ERL applied, against the model's reading of the config.
	erlMiss := map[string]bool{}
	for i, want := range best.erlLimits {
		k := "status[" + strconv.Itoa(i) + "].current_limit"
		erlMiss[k] = orAbsent(erl, k) != want
	}
	var out []diff
	m.misses = m.misses[:0]
	headers := m.headerPreds(fg, best)
	for _, k := range keys(erl, fg) {
		e, g := orAbsent(erl, k), orAbsent(fg, k)
		p, known := best.preds[k]
		if strings.HasPrefix(k, "header ") {
			p, known = headers(k, e, g)
		}
		if e == g {
			if known && !p.ok(g) {
				m.misses = append(m.misses, k+": both "+g+", model "+p.want)
			}
			continue
		}
		d := diff{field: k, erl: e, fg: g}
		i, _ := statusIndex(k)
		switch x := p.explain(g); {
		case !known:
			d.note = "the model predicts nothing here"
		case erlMiss["status["+strconv.Itoa(i)+"].current_limit"]:
			d.note = "ERL applied a limit the test's model of the config did not expect"
		case !p.ok(g):
			d.note = "model: " + p.want
			if p.miss != nil {
				d.note = p.miss(g)
			}
		case x.undoc != "":
			d.note = x.undoc
		case x.follows:
			d.reasons, d.note = followed(out, x.reasons)
		default:
			d.reasons = x.reasons
			if len(d.reasons) == 0 {
				d.note = "model: " + p.want
			}
		}
		out = append(out, d)
	}
	m.apply(best, fg)
	return m.documentedOnly(out)
}

// followed returns the reasons of the status fields in ds, or fallback
// when none differs; with one undocumented, none and a note.
func followed(ds []diff, fallback []string) ([]string, string) {
	var rs []string
	for _, d := range ds {
		if !strings.HasPrefix(d.field, "status[") {
			continue
		}
		if len(d.reasons) == 0 {
			return nil, "follows " + d.field + ", which differs undocumented"
		}
		rs = append(rs, d.reasons...)
	}
	if len(rs) == 0 {
		rs = fallback
	}
	slices.Sort(rs)
	return slices.Compact(rs), ""
}

// documentedOnly turns a reason docs/envoy.md does not state into a note:
// a difference is documented only while the doc says so (and, in the
// fixed pass, only when it is not a token bucket's).
func (m *model) documentedOnly(ds []diff) []diff {
	for i := range ds {
		var keep []string
		for _, r := range ds[i].reasons {
			if m.fixed && bucketOnly[r] {
				ds[i].note = strings.TrimSpace(ds[i].note + " (" + r + ": a token bucket's, and fairgate counts in fixed windows)")
			} else if m.docs[r] {
				keep = append(keep, r)
			} else {
				ds[i].note = strings.TrimSpace(ds[i].note + " (" + r + ": not in docs/envoy.md)")
			}
		}
		ds[i].reasons = keep
	}
	return ds
}

// apply moves the buckets on by c and narrows them to fg's figures.
func (m *model) apply(c *candidate, fg fields) {
	m.remember(c)
	for key, lohi := range c.after {
		b := m.buckets[key]
		b.lo, b.hi = max(0, lohi[0]), max(0, lohi[1])
	}
	for key, cs := range c.causes {
		if b := m.buckets[key]; b != nil {
			for _, cause := range cs {
				b.causes[cause] = true
			}
		}
	}
	// After a take it paid, fairgate's limit_remaining is floor(tokens):
	// tokens ∈ [r, r+1). (Refused, it says 0, as ERL does.) A check's is
	// its read before the charges: the bucket's now only when the call
	// charged it nothing.
	paid, charged, count := map[string]bool{}, map[string]bool{}, map[string]int{}
	check := c.checkReads
	for _, t := range c.takes {
		paid[t.key] = paid[t.key] || t.paid
		charged[t.key] = charged[t.key] || t.paid && t.charge > 0
	}
	for i, key := range c.descBuckets {
		if !check[i] {
			count[key]++
		}
	}
	for i, key := range c.descBuckets {
		p := "status[" + strconv.Itoa(i) + "]."
		r, err := strconv.ParseFloat(fg[p+"limit_remaining"], 64)
		b := m.buckets[key]
		if key == "" || b == nil || !paid[key] || err != nil || fg[p+"current_limit"] == "-" || check[i] && charged[key] || !check[i] && !c.v.merged && count[key] > 1 {
			continue
		}
		lo, hi := max(b.lo, r), min(b.hi, r+1-eps)
		if lo > hi+eps { // outside the prediction: follow fairgate
			lo, hi = r, r+1-eps
		}
		b.lo, b.hi = lo, hi
	}
}

// headerPreds predicts fairgate's headers from its statuses. With the
// headers off in both (the defaults), any is undocumented. With them on:
// RateLimit-Policy, RateLimit and Retry-After are fairgate's alone;
// RateLimit-Limit and -Remaining describe the descriptor ERL's would (the
// last OVER_LIMIT, else the first with the fewest left), or the one that
// decided in fairgate (an OVER_LIMIT one, else one with the fewest left),
// as docs/envoy.md says; RateLimit-Reset is at most the wait for the
// cost, or one refill.
func (m *model) headerPreds(fg fields, c *candidate) func(k, e, g string) (pred, bool) {
	type st struct {
		i               int
		rpu, rem, reset string
		over            bool
	}
	var sts []st
	erlDec := -1
	minRem := uint64(math.MaxUint32)
	for i := 0; ; i++ {
		p := "status[" + strconv.Itoa(i) + "]."
		code, ok := fg[p+"code"]
		if !ok {
			break
		}
		if fg[p+"current_limit"] == "-" {
			continue
		}
		rpu, _, _ := strings.Cut(fg[p+"current_limit"], "/")
		s := st{i: i, rpu: rpu, rem: fg[p+"limit_remaining"], reset: fg[p+"duration_until_reset"], over: code == "OVER_LIMIT"}
		sts = append(sts, s)
		r, _ := strconv.ParseUint(s.rem, 10, 32)
		if r < minRem {
			erlDec, minRem = len(sts)-1, r
		}
		if s.over {
			erlDec, minRem = len(sts)-1, 0
		}
	}
	// fairgate's own choice: one over, else one with the fewest left.
	var deciders []st
	for _, s := range sts {
		if s.over {
			deciders = append(deciders, s)
		}
	}
	if len(deciders) == 0 {
		for _, s := range sts {
			if r, _ := strconv.ParseUint(s.rem, 10, 32); r == minRem {
				deciders = append(deciders, s)
			}
		}
	}
	// A figure of ERL's choice follows the statuses; one of fairgate's
	// own choice is the documented choice of the descriptor that decided.
	figure := func(of func(st) string) pred {
		erls := exact(of(sts[erlDec]), m.shape()...)
		erls.follows = true
		mine := pred{want: "fairgate's choice", reasons: []string{"headers"}, ok: func(v string) bool {
			return slices.ContainsFunc(deciders, func(s st) bool { return of(s) == v })
		}}
		p := oneOf(erls, mine)
		p.miss = func(string) string {
			return "the headers describe another descriptor than ERL's (the last OVER_LIMIT, else the first with the fewest left) or fairgate's (one over, else one with the fewest left)"
		}
		return p
	}
	return func(k, e, g string) (pred, bool) {
		switch {
		case !m.erlHeaders:
			return undoc(g, noteHeadersOff), true
		case e == "(absent)" && slices.Contains([]string{"header RateLimit-Policy", "header RateLimit", "header Retry-After"}, k):
			return exact(g, "headers"), true
		case erlDec < 0 && g == "(absent)":
			// No status of fairgate's carries a current_limit to describe.
			return pred{want: g, ok: func(v string) bool { return v == g }, follows: true}, true
		case erlDec < 0:
			return pred{}, false
		}
		switch k {
		case "header RateLimit-Limit":
			return figure(func(s st) string { return s.rpu }), true
		case "header RateLimit-Remaining":
			return figure(func(s st) string { return s.rem }), true
		case "header RateLimit-Reset":
			if m.fixed { // the window's end, as the statuses tell it
				return figure(func(s st) string { return s.reset }), true
			}
			bound := 0.0
			for _, s := range slices.Concat(deciders, []st{sts[erlDec]}) {
				if s.i < len(c.resets) {
					bound = max(bound, c.resets[s.i])
				}
			}
			return pred{want: "0.." + strconv.Itoa(int(math.Ceil(bound))), reasons: []string{"token-bucket"}, ok: func(s string) bool {
				n, err := strconv.Atoi(s)
				return err == nil && n >= 0 && float64(n) <= math.Ceil(bound-eps)
			}}, true
		}
		return pred{}, false
	}
}

// classifyError: a call either service refused. fairgate's refusal of
// what docs/envoy.md says it refuses is documented; anything else is not.
func (m *model) classifyError(req *rlsv3.RateLimitRequest, erl, fg fields) []diff {
	e, g := render(erl), render(fg)
	if e == g {
		return nil
	}
	d := diff{field: "answer", erl: e, fg: g}
	if kind := refusalKind(req); fg["error"] == "InvalidArgument" && kind != "" {
		d.reasons = []string{kind}
	} else {
		d.note = "not a request docs/envoy.md says fairgate refuses"
	}
	return m.documentedOnly([]diff{d})
}

// The bounds docs/envoy.md gives for rls.max_descriptors and
// rls.max_entries (their defaults).
const (
	maxDescriptors = 64
	maxEntries     = 32
)

// refusalKind is the documented difference under which docs/envoy.md
// says fairgate answers req InvalidArgument, or "".
func refusalKind(req *rlsv3.RateLimitRequest) string {
	switch {
	case req.Domain == "" || len(req.Descriptors) == 0:
		return "invalid-argument"
	case len(req.Descriptors) > maxDescriptors:
		return "bounds"
	}
	for _, d := range req.Descriptors {
		if len(d.Entries) > maxEntries {
			return "bounds"
		}
		if o := d.GetLimit(); o != nil {
			if _, ok := typev3.RateLimitUnit_name[int32(o.Unit)]; !ok || o.Unit == typev3.RateLimitUnit_UNKNOWN ||
				o.GetUnitMultiplier() != nil && o.GetUnitMultiplier().Value == 0 {
				return "override-unit"
			}
		}
	}
	return ""
}
