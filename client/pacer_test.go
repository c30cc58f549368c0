package client

import (
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"
)

func TestQuotaEarliest(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n float64) time.Time { return t0.Add(seconds(n / 1000)) }
	tests := []struct {
		name string
		q    quota
		now  time.Time
		c    float64   // the request's units
		want time.Time // zero: no constraint
	}{
		{"never observed", quota{}, t0, 1, time.Time{}},
		{"reset passed", quota{at: t0, r: 0, t: 1}, ms(1000), 1, time.Time{}},
		{"spread 20 over 1 s", quota{at: t0, r: 20, t: 1, last: t0}, t0, 1, ms(50)},
		{"spread from the last send", quota{at: t0, r: 20, t: 1, last: ms(30)}, t0, 1, ms(80)},
		{"spread what is left of the window", quota{at: t0, r: 10, t: 2, last: ms(1000)}, ms(1000), 1, ms(1100)},
		{"cost 5 spaced 5×", quota{at: t0, r: 20, t: 1, last: t0}, t0, 5, ms(250)},
		{"short: wait for the refill", quota{at: t0, r: 0.5, t: 5, rate: 5}, t0, 1, ms(100)},
		{"short, no known rate: wait for the reset", quota{at: t0, r: 0, t: 3}, t0, 1, ms(3000)},
		{"reserved units count", quota{at: t0, r: 12, t: 4, sent: 2, spent: 10}, t0, 5, ms(4000)},
		{"a cheap request after dear ones", quota{at: t0, r: 12, t: 4, sent: 2, spent: 10, last: t0}, t0, 1, ms(2000)},
		{"an absurd reset waits the longest, not overflows to now", quota{at: t0, r: 0, t: 1e300}, t0, 1, t0.Add(maxRetryAfter)},
		{"refill is capped at the limit", quota{at: t0, r: 24, t: 1.2, limit: 25, rate: 5, last: ms(1000)}, ms(1000), 1, ms(1000 + 200.0/25)},
	}
	for _, tt := range tests {
		got := tt.q.earliest(tt.now, tt.c)
		if d := got.Sub(tt.want); d < -time.Microsecond || d > time.Microsecond || got.IsZero() != tt.want.IsZero() {
			t.Errorf("%s: earliest = %v, want %v", tt.name, got.Sub(t0), tt.want.Sub(t0))
		}
	}
}

// simBucket is a token bucket that answers exactly (no rounding), for
// the tests of what a pace learns.
type simBucket struct {
	name                string
	burst, rate, tokens float64
	last                time.Time
}

func (b *simBucket) at(now time.Time) {
	if b.last.IsZero() {
		b.tokens = b.burst
	} else {
		b.tokens = min(b.burst, b.tokens+b.rate*now.Sub(b.last).Seconds())
	}
	b.last = now
}

func (b *simBucket) item(state bool) string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	if state {
		return `"` + b.name + `";r=` + f(b.tokens) + `;t=` + f((b.burst-b.tokens)/b.rate)
	}
	return `"` + b.name + `";q=` + f(b.burst) + `;w=` + f(b.burst/b.rate)
}

// takeAll takes cost from every bucket of bs (all or nothing) and returns
// the headers fairgate sends: RateLimit-Policy names every bucket, the
// RateLimit field the one with the fewest tokens left.
func takeAll(now time.Time, cost float64, bs ...*simBucket) http.Header {
	ok := true
	for _, b := range bs {
		b.at(now)
		ok = ok && b.tokens >= cost
	}
	tight, policy := bs[0], ""
	for i, b := range bs {
		if ok {
			b.tokens -= cost
		}
		if b.tokens < tight.tokens {
			tight = b
		}
		if i > 0 {
			policy += ", "
		}
		policy += b.item(false)
	}
	return http.Header{hdrRateLimitPolicy: {policy}, hdrRateLimit: {tight.item(true)}}
}

// TestPaceLearnsCostPerRoute mixes GETs (1 token) with exports (20, from
// the tenant's bucket and the exports group's) as fairgate reports them:
// a GET's response tells the tenant's state, an export's the group's. The
// pace learns each route's own cost, and spaces a GET as a GET.
func TestPaceLearnsCostPerRoute(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tenant := &simBucket{name: "tenant", burst: 100, rate: 10}
	exports := &simBucket{name: "exports", burst: 60, rate: 2}
	const getKey, exportKey = 1, 2
	var p pace
	now := t0
	for i := range 160 { // 40 s: four GETs a second, an export every 8 s
		now = now.Add(250 * time.Millisecond)
		key, cost, bs := uint64(getKey), 1.0, []*simBucket{tenant}
		if i%32 == 0 {
			key, cost, bs = exportKey, 20, []*simBucket{tenant, exports}
		}
		res, ok := p.reserve(now, now.Add(time.Hour), key)
		if !ok {
			t.Fatalf("step %d: no slot", i)
		}
		p.observe(now, takeAll(now, cost, bs...), http.StatusOK, 0, "", res)
	}
	if got := p.routes.get(getKey).cost; got != 1 {
		t.Errorf("GET cost = %v, want 1", got)
	}
	if got := p.routes.get(exportKey).cost; got != 20 {
		t.Errorf("export cost = %v, want 20", got)
	}
	// The next GET is spaced 1 × tLeft / E after the last send, as a GET.
	q := &p.quotas[0]
	el := now.Sub(q.at).Seconds()
	want := q.last.Add(seconds(1 * (q.t - el) / (q.refilled(el) - q.spent)))
	if got := q.earliest(now, p.routes.get(getKey).cost); !got.Equal(want) {
		t.Errorf("GET earliest %v after the last send, want %v", got.Sub(q.last), want.Sub(q.last))
	}
}

func TestQuotaSample(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	base := quota{at: t0, seq: 1, r: 20, t: 4, limit: 25, rate: 5}
	at := t0.Add(200 * time.Millisecond) // 1 token refilled: 21 before the window's sends
	mk := func(res ...reservation) quota {
		q := base
		for i := range res {
			q.count(&res[i], t0)
		}
		return q
	}
	get := reservation{key: 1, quotas: 1, seq: 1, cost: 1}
	getGuess := reservation{key: 1, quotas: 1, seq: 1, cost: 1, guessed: true}
	export := reservation{key: 2, quotas: 1, seq: 1, cost: 20}
	exportGuess := reservation{key: 2, quotas: 1, seq: 1, cost: 1, guessed: true}
	tests := []struct {
		name    string
		q       quota
		r       float64
		res     reservation // the request whose response reports r
		wantKey uint64
		want    float64
		ok      bool
	}{
		{"one route: the drop shared", mk(exportGuess, exportGuess), 1, exportGuess, 2, 10, true},
		{"one route, told by another's response", mk(getGuess), 20, export, 1, 1, true},
		{"mixed, the others known", mk(export, getGuess), 0, getGuess, 1, 1, true},
		{"mixed, another guessed", mk(exportGuess, getGuess), 0, getGuess, 0, 0, false},
		{"mixed, the response's request outside the window", mk(export, get), 0, reservation{key: 1, quotas: 1, seq: 0, cost: 1}, 0, 0, false},
		{"nothing sent", mk(), 21, get, 0, 0, false},
	}
	for _, tt := range tests {
		key, c, ok := tt.q.sample(at, tt.r, &tt.res, 1)
		if key != tt.wantKey || math.Abs(c-tt.want) > 1e-9 || ok != tt.ok {
			t.Errorf("%s: sample = %d, %v, %v; want %d, %v, %v", tt.name, key, c, ok, tt.wantKey, tt.want, tt.ok)
		}
	}
	q := mk(get)
	q.set(at, 16, 2, 7)
	if q.sent != 0 || q.spent != 0 || q.seq != 7 || !q.at.Equal(at) {
		t.Fatalf("set did not start a new window: %+v", q)
	}
	var r route
	r.learn(5, 25)
	r.learn(0.5, 25) // clamped to 1
	if want := 5 + costEWMA*(1-5); math.Abs(r.cost-want) > 1e-9 {
		t.Fatalf("cost = %v, want %v", r.cost, want)
	}
}

// TestPaceQuotaScope checks which quotas pace which route: those its
// responses named, and those every response named.
func TestPaceQuotaScope(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tenantOnly := http.Header{hdrRateLimitPolicy: {`"tenant";q=500;w=5`}, hdrRateLimit: {`"tenant";r=400;t=1`}}
	grouped := http.Header{hdrRateLimitPolicy: {`"tenant";q=500;w=5, "exports";q=20;w=10`}, hdrRateLimit: {`"exports";r=0;t=10`}}
	send := func(p *pace, key uint64, h http.Header) uint64 {
		t.Helper()
		res, ok := p.reserve(t0, t0.Add(time.Hour), key)
		if !ok {
			t.Fatal("no slot")
		}
		p.observe(t0, h, http.StatusOK, 0, "", res)
		return res.quotas
	}
	bit := func(p *pace, name string) uint64 {
		for i := range p.quotas {
			if p.quotas[i].name == name {
				return 1 << i
			}
		}
		t.Fatalf("no quota %q", name)
		return 0
	}

	var p pace
	send(&p, 1, tenantOnly)
	got := send(&p, 2, grouped)
	tenant, exports := bit(&p, "tenant"), bit(&p, "exports")
	if got != tenant {
		t.Fatalf("the first export counted against %b, want the tenant (%b) only: it was not named yet", got, tenant)
	}
	for _, tt := range []struct {
		key  uint64
		want uint64
	}{{1, tenant}, {2, tenant | exports}, {3, tenant}} {
		res, ok := p.reserve(t0, t0.Add(time.Hour), tt.key)
		if !ok || res.quotas != tt.want {
			t.Errorf("route %d: quotas %b, want %b", tt.key, res.quotas, tt.want)
		}
		p.cancel(res)
	}

	// A quota every response named so far paces a new route too, until a
	// response does without it.
	var p2 pace
	send(&p2, 2, grouped)
	tenant, exports = bit(&p2, "tenant"), bit(&p2, "exports")
	if got := send(&p2, 3, tenantOnly); got != tenant|exports {
		t.Fatalf("new route after only grouped responses: quotas %b, want both", got)
	}
	res, _ := p2.reserve(t0, t0.Add(time.Hour), 4)
	if res.quotas != tenant {
		t.Fatalf("new route after a tenant-only response: quotas %b, want the tenant's", res.quotas)
	}
}

func TestPaceObserve(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := http.Header{}
	h.Set("RateLimit", `"tenant";r=20;t=1, "exports";r=3;t=4`)
	h.Set("RateLimit-Policy", `"tenant";q=25;w=5, "exports";q=10;w=10`)
	h.Set("RateLimit-Remaining", "3") // ignored: the structured field wins
	h.Set("RateLimit-Reset", "4")
	var p pace
	p.observe(t0, h, http.StatusOK, 0, "", reservation{key: 1})
	if len(p.quotas) != 2 {
		t.Fatalf("quotas %+v, want tenant and exports", p.quotas)
	}
	if q := p.quotas[0]; q.name != "tenant" || q.r != 20 || q.t != 1 || q.limit != 25 || q.rate != 5 {
		t.Errorf("tenant quota %+v", q)
	}
	if q := p.quotas[1]; q.name != "exports" || q.r != 3 || q.t != 4 || q.limit != 10 || q.rate != 1 {
		t.Errorf("exports quota %+v", q)
	}

	// A 429 without a reason holds every send until its Retry-After.
	p.observe(t0, http.Header{}, http.StatusTooManyRequests, 2*time.Second, "", reservation{key: 1})
	res, ok := p.reserve(t0, t0.Add(time.Minute), 9)
	if !ok || !res.at.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("after a 429 with Retry-After 2s: reserve at %v, %v", res.at.Sub(t0), ok)
	}
	// A slot past the limit reserves nothing; cancel gives a slot back.
	if _, ok := p.reserve(t0, t0.Add(time.Second), 9); ok {
		t.Fatal("reserved a slot past the limit")
	}
	p.cancel(res)
	if p.quotas[0].sent != 0 || p.quotas[0].spent != 0 || !p.quotas[0].last.IsZero() {
		t.Fatalf("cancel left %+v", p.quotas[0])
	}

	// The trio alone, with an epoch reset.
	var p2 pace
	h2 := http.Header{}
	h2.Set("RateLimit-Limit", "100, 100;w=60")
	h2.Set("RateLimit-Remaining", "40")
	h2.Set("RateLimit-Reset", "1767225630") // t0 + 30 s as a Unix time
	p2.observe(t0, h2, http.StatusOK, 0, "", reservation{key: 1})
	if len(p2.quotas) != 1 || p2.quotas[0].limit != 100 || p2.quotas[0].r != 40 || p2.quotas[0].t != 30 || p2.quotas[0].rate != 0 {
		t.Fatalf("trio quota %+v", p2.quotas)
	}
	if res, _ := p2.reserve(t0, t0.Add(time.Hour), 5); res.quotas != 1 {
		t.Fatalf("the trio's quota does not pace a new route: %b", res.quotas)
	}
}

// TestPaceHoldScope checks which routes a 429 holds, by its reason and by
// what its RateLimit field names.
func TestPaceHoldScope(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const get, export, otherExport, fresh = 1, 2, 3, 4
	tests := []struct {
		reason string
		field  string // the 429's RateLimit field; empty: none
		held   []uint64
	}{
		{"tenant_quota", `"tenant";r=0;t=5`, []uint64{get, export, otherExport, fresh}},
		{"max_concurrent", ``, []uint64{get, export, otherExport, fresh}},
		{"", ``, []uint64{get, export, otherExport, fresh}},
		{"a_reason_from_elsewhere", `"exports";r=0;t=37`, []uint64{get, export, otherExport, fresh}},
		{"group_quota", `"exports";r=0;t=37`, []uint64{export, otherExport}},
		{"group_quota", ``, []uint64{export}},
		{"limit_quota", `"daily";r=0;t=3600`, []uint64{get, export, otherExport, fresh}},
	}
	for _, tt := range tests {
		var p pace
		for _, key := range []uint64{get, export, otherExport} {
			policy := `"tenant";q=500;w=5, "daily";q=10000;w=86400`
			if key != get {
				policy += `, "exports";q=20;w=10`
			}
			res, _ := p.reserve(t0, t0.Add(time.Hour), key)
			p.observe(t0, http.Header{hdrRateLimitPolicy: {policy}, hdrRateLimit: {`"tenant";r=480;t=0.2`}}, http.StatusOK, 0, "", res)
		}
		h := http.Header{hdrRateLimitPolicy: {`"tenant";q=500;w=5, "daily";q=10000;w=86400, "exports";q=20;w=10`}}
		if tt.field != "" {
			h[hdrRateLimit] = []string{tt.field}
		}
		res, _ := p.reserve(t0, t0.Add(time.Hour), export)
		p.observe(t0, h, http.StatusTooManyRequests, 37*time.Second, tt.reason, res)
		for _, key := range []uint64{get, export, otherExport, fresh} {
			res, _ := p.reserve(t0, t0.Add(time.Hour), key)
			wantHeld := false
			for _, k := range tt.held {
				wantHeld = wantHeld || k == key
			}
			if held := !res.at.Before(t0.Add(37 * time.Second)); held != wantHeld {
				t.Errorf("%q with RateLimit %q: route %d sends at %v, held %v; want held %v", tt.reason, tt.field, key, res.at.Sub(t0), held, wantHeld)
			}
			p.cancel(res)
		}
	}
}

func TestRouteTableLRU(t *testing.T) {
	var rt routeTable
	for k := range uint64(maxRoutes) {
		rt.add(k).cost = float64(k + 1)
	}
	rt.get(0) // used: route 1 is now the least recently used
	rt.add(maxRoutes)
	if rt.get(1) != nil {
		t.Fatal("the least recently used route was kept")
	}
	if r := rt.get(0); r == nil || r.cost != 1 {
		t.Fatalf("route 0 = %+v, want it kept with its cost", r)
	}
	if r := rt.get(maxRoutes); r == nil || r.cost != 0 {
		t.Fatalf("the new route = %+v, want it fresh", r)
	}
	if len(rt.slots) != maxRoutes || len(rt.index) != maxRoutes {
		t.Fatalf("%d slots, %d indexed; want %d", len(rt.slots), len(rt.index), maxRoutes)
	}
	// The order survives many evictions: always the oldest goes.
	for k := uint64(maxRoutes + 1); k < 3*maxRoutes; k++ {
		rt.add(k)
		if rt.get(k-maxRoutes) != nil {
			t.Fatalf("route %d kept after %d newer ones", k-maxRoutes, maxRoutes)
		}
	}
}

// TestPaceLearnsFromRefusal checks the cost a bucket's 429 teaches: what
// the bucket holds once the Retry-After has passed, at most its limit,
// never lowering a cost already learned, and nothing from a Retry-After
// too short to tell.
func TestPaceLearnsFromRefusal(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		reason  string
		field   string
		ra      time.Duration
		learned float64 // the route's cost before
		want    float64
	}{
		{"group: 4 left, 8 s at 2 a second, capped at 20", "group_quota", `"exports";r=4;t=8`, 8 * time.Second, 0, 20},
		{"tenant", "tenant_quota", `"tenant";r=10;t=3`, 2 * time.Second, 0, 21},
		{"a cost already above it stays", "tenant_quota", `"tenant";r=10;t=3`, 2 * time.Second, 30, 30},
		{"a cost below it rises", "group_quota", `"exports";r=4;t=8`, 8 * time.Second, 1, 20},
		{"one second tells nothing", "tenant_quota", `"tenant";r=0;t=1`, time.Second, 0, 0},
		{"not a bucket's reason", "max_concurrent", `"tenant";r=10;t=3`, 8 * time.Second, 0, 0},
		{"no reason", "", `"tenant";r=10;t=3`, 8 * time.Second, 0, 0},
		{"no RateLimit field", "group_quota", ``, 8 * time.Second, 0, 0},
	}
	for _, tt := range tests {
		var p pace
		h := http.Header{hdrRateLimitPolicy: {`"tenant";q=500;w=100, "exports";q=20;w=10`}}
		if tt.field != "" {
			h[hdrRateLimit] = []string{tt.field}
		}
		if tt.learned > 0 {
			p.routes.add(1).cost = tt.learned
		}
		p.observe(t0, h, http.StatusTooManyRequests, tt.ra, tt.reason, reservation{key: 1})
		if got := p.routes.get(1).cost; got != tt.want {
			t.Errorf("%s: cost %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestPaceRouteWithoutQuotas: a server that limits /search alone (its
// answers elsewhere name no quota) never paces /other by /search's
// empty quota, nor a route not seen yet once a success has named none.
func TestPaceRouteWithoutQuotas(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const search, other, fresh = 1, 2, 3
	var p pace
	res, _ := p.reserve(t0, t0.Add(time.Hour), search)
	p.observe(t0, http.Header{hdrRateLimitPolicy: {`"search";q=10;w=60`}, hdrRateLimit: {`"search";r=0;t=60`}}, http.StatusOK, 0, "", res)
	res, _ = p.reserve(t0, t0.Add(time.Hour), other)
	p.observe(t0, http.Header{}, http.StatusOK, 0, "", res)
	for _, key := range []uint64{other, fresh} {
		res, _ := p.reserve(t0, t0.Add(time.Hour), key)
		if !res.at.Equal(t0) {
			t.Errorf("route %d sends at +%v; want at once: no quota of its own is empty", key, res.at.Sub(t0))
		}
		p.cancel(res)
	}
	if res, _ := p.reserve(t0, t0.Add(time.Hour), search); !res.at.After(t0) {
		t.Error("/search, its quota empty, sends at once")
	}
}

// TestPaceGroupRefusalFirst: a batch job's first answers are exports and
// a group_quota 429; the first GET after them is not held by the exports
// group, which a group's refusal shows is not every route's.
func TestPaceGroupRefusalFirst(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const export, get = 1, 2
	var p pace
	policy := `"tenant";q=500;w=5, "exports";q=20;w=10`
	res, _ := p.reserve(t0, t0.Add(time.Hour), export)
	p.observe(t0, http.Header{hdrRateLimitPolicy: {policy}, hdrRateLimit: {`"exports";r=0;t=10`}}, http.StatusOK, 0, "", res)
	res, _ = p.reserve(t0, t0.Add(time.Hour), export)
	p.observe(t0, http.Header{hdrRateLimitPolicy: {policy}, hdrRateLimit: {`"exports";r=0;t=10`}}, http.StatusTooManyRequests, 10*time.Second, "group_quota", res)
	if res, _ := p.reserve(t0, t0.Add(time.Hour), get); !res.at.Before(t0.Add(time.Second)) {
		t.Errorf("the first GET sends at +%v; want it not held by the exports group's refusal", res.at.Sub(t0))
	}
}
