package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// settleStore is a MemoryStore for these tests: its wall clock is its own
// clock (0 at Unix 0), so windows count in the instants the tests pass,
// and it never sweeps by itself.
func settleStore() *MemoryStore {
	return NewMemoryStore(MemoryStoreOptions{SweepInterval: time.Hour, Now: func() time.Time { return time.Unix(0, 0) }})
}

// stateOf returns the state s holds for k, and whether it holds one.
func stateOf(s *MemoryStore, k BucketKey) (bucket, bool, bool) {
	h, sh := s.locate(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.getLocked(h, k)
	if e == nil {
		return bucket{}, false, false
	}
	return e.b, e.fixed, true
}

// tokensOf returns the tokens bucket k holds at now under l in s (Burst
// when it holds none), debt included.
func tokensOf(s *MemoryStore, k BucketKey, l Limit, now int64) float64 {
	b, fixed, ok := stateOf(s, k)
	if !ok || fixed {
		return l.Burst
	}
	return b.tokensAt(l, now)
}

// model is the reference for the settlement tests: a bucket's tokens or a
// window's units used, by the rules of Settler, written out plainly.
type model struct {
	l      Limit
	tokens float64 // a bucket's tokens at last; a window's units used
	last   int64   // a bucket's instant; a window's end (0: never seen)
}

func (m *model) at(now int64) float64 {
	if now <= m.last {
		return m.tokens
	}
	return math.Min(m.l.Burst, m.tokens+float64(now-m.last)/1e9*m.l.Rate)
}

// left is what m holds for a take at now: a bucket's tokens, or the
// window's units not used (the state of an earlier window counts none).
func (m *model) left(now int64) float64 {
	if m.l.Fixed() {
		if m.last < m.l.End {
			return m.l.Burst
		}
		return math.Max(0, m.l.Burst-m.tokens)
	}
	return m.at(now)
}

func (m *model) take(now int64, cost float64) {
	if m.l.Fixed() {
		if m.last < m.l.End {
			m.tokens, m.last = 0, m.l.End
		}
		m.tokens += cost
		return
	}
	m.tokens, m.last = m.at(now)-cost, now
}

// settle applies cost and reports whether a bound cut it short.
func (m *model) settle(now int64, cost float64) bool {
	if m.l.Fixed() {
		if m.last != m.l.End || now >= m.l.End {
			return false
		}
		used := m.tokens + cost
		switch {
		case used > math.Max(m.tokens, m.l.Burst)+m.l.Burst:
			m.tokens = math.Max(m.tokens, m.l.Burst) + m.l.Burst
			return true
		case used < 0:
			m.tokens = 0
			return true
		}
		m.tokens = used
		return false
	}
	before := m.at(now)
	after, cut := before-cost, false
	switch {
	case after < math.Min(before, 0)-m.l.Burst:
		after, cut = math.Min(before, 0)-m.l.Burst, true
	case after > m.l.Burst:
		after, cut = m.l.Burst, true
	}
	m.tokens, m.last = after, now
	return cut
}

// TestSettleMatchesModel runs seeded random streams of reservations (a
// TakeAll over one tenant's buckets and a fixed window) and settlements
// of what each admitted request used (nothing, less, as much, more, far
// more than its reservation, out of order), on a fake clock, against
// model: after every step each bucket's tokens and window's units are the
// model's, never below −Burst nor above Burst (a window's within 0 and
// 2 × Burst); every reservation is decided as the model decides it, and
// one refused in debt is told to retry when the debt and its cost are
// repaid. While no bound cuts a settlement short, a bucket has been
// charged what the requests used: its tokens are the burst, plus the
// refill, less the sum of what they used (and what the open ones
// reserved).
func TestSettleMatchesModel(t *testing.T) {
	for seed := range uint64(8) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { settleStream(t, seed) })
	}
}

func settleStream(t *testing.T, seed uint64) {
	s := settleStore()
	rng := rand.New(rand.NewPCG(seed, 42))
	key := func(scope string) BucketKey { return BucketKey{Tenant: "acme", Scope: scope} }
	window := Every(time.Second)
	all := []Take{
		{Key: key(""), Limit: Limit{Rate: 10, Burst: 20}},
		{Key: key("export"), Limit: Limit{Rate: 2, Burst: 8}},
		{Key: key("minute"), Limit: window.Limit(15, time.Unix(0, 0))},
	}
	models := make([]*model, len(all))
	for i := range all {
		models[i] = &model{l: all[i].Limit, tokens: all[i].Limit.Burst}
		if all[i].Limit.Fixed() {
			models[i].tokens = 0
		}
	}
	// The ledger of each bucket since a bound last cut a settlement:
	// tokens then, the refill credited since, and what was charged.
	type ledger struct{ base, refilled, charged float64 }
	ledgers := make([]ledger, len(all))
	for i := range ledgers {
		ledgers[i].base = all[i].Limit.Burst
	}
	type request struct {
		id      string
		at      []int // indexes into all
		limits  []Limit
		reserve float64
	}
	var open []request
	// inFlight is the most requests open on each bucket at once: a
	// bucket's debt is at most a burst for each.
	inFlight := make([]int, len(all))
	var stats struct{ admitted, refused, inDebt, debtRefusals, settled, cut, windowSettled int }
	now := int64(time.Hour)
	for step := range 3000 {
		dt := int64(rng.IntN(120)) * int64(time.Millisecond)
		for i, m := range models {
			if !m.l.Fixed() {
				ledgers[i].refilled += m.at(now+dt) - m.at(now)
			}
		}
		now += dt
		all[2].Limit = window.Limit(15, time.Unix(0, now))
		models[2].l = all[2].Limit
		if len(open) == 0 || rng.IntN(2) == 0 {
			reserve := []float64{0.5, 1, 2.5, 4}[rng.IntN(4)]
			var takes []Take
			var at []int
			for _, i := range rng.Perm(len(all))[:1+rng.IntN(len(all))] {
				tk := all[i]
				tk.Cost = reserve
				takes, at = append(takes, tk), append(at, i)
			}
			res := make([]Result, len(takes))
			if err := s.TakeAllAt(now, takes, res); err != nil {
				t.Fatal(err)
			}
			want := true
			for _, i := range at {
				want = want && models[i].left(now) >= reserve
			}
			for j, i := range at {
				m := models[i]
				if res[j].Allowed != want {
					t.Fatalf("step %d: take %d (%+v) allowed %v, model %v (holds %v)", step, j, takes[j], res[j].Allowed, want, m.left(now))
				}
				if m.l.Fixed() || want {
					continue
				}
				held := m.at(now)
				wantRetry := secondsToDuration((reserve - held) / m.l.Rate)
				if held >= reserve {
					wantRetry = 0
				}
				if d := res[j].RetryAfter - wantRetry; d < -time.Microsecond || d > time.Microsecond {
					t.Fatalf("step %d: take %d refused holding %v: RetryAfter %v, want %v", step, j, held, res[j].RetryAfter, wantRetry)
				}
				if held < 0 {
					stats.debtRefusals++
				}
			}
			if !want {
				stats.refused++
				continue
			}
			stats.admitted++
			r := request{id: fmt.Sprint("req-", step), at: at, reserve: reserve}
			for _, i := range at {
				models[i].take(now, reserve)
				r.limits = append(r.limits, all[i].Limit)
				ledgers[i].charged += reserve
			}
			open = append(open, r)
			for _, i := range at {
				n := 0
				for _, o := range open {
					if slices.Contains(o.at, i) {
						n++
					}
				}
				inFlight[i] = max(inFlight[i], n)
			}
		} else {
			n := rng.IntN(len(open))
			r := open[n]
			open = append(open[:n], open[n+1:]...)
			used := []float64{0, r.reserve / 2, r.reserve, 2 * r.reserve, 30}[rng.IntN(5)]
			takes := make([]Take, len(r.at))
			for j, i := range r.at {
				// The window of the reservation: if it is over, there is
				// nothing to settle.
				takes[j] = Take{Key: all[i].Key, Limit: r.limits[j], Cost: used - r.reserve}
			}
			if err := s.SettleAt(now, r.id, takes); err != nil {
				t.Fatal(err)
			}
			stats.settled++
			for j, i := range r.at {
				m := models[i]
				if m.l.Fixed() {
					if r.limits[j].End == m.l.End && m.last == m.l.End {
						stats.windowSettled++
					}
					saved := m.l
					m.l = r.limits[j]
					m.settle(now, takes[j].Cost)
					m.l = saved
					continue
				}
				if m.settle(now, takes[j].Cost) {
					stats.cut++
					ledgers[i] = ledger{base: m.tokens}
				} else {
					ledgers[i].charged += takes[j].Cost
				}
			}
		}
		for i, m := range models {
			b, fixed, ok := stateOf(s, all[i].Key)
			if m.l.Fixed() {
				var used float64
				if ok && fixed {
					used = b.tokens
				}
				if bound := float64(1+inFlight[i]) * m.l.Burst; math.Abs(used-m.tokens) > 1e-9 || used < 0 || used > bound {
					t.Fatalf("step %d: window %v: %v used, model %v (within 0 and %v)", step, all[i].Key, used, m.tokens, bound)
				}
				continue
			}
			got, l := tokensOf(s, all[i].Key, m.l, now), m.l
			if floor := -float64(inFlight[i]) * l.Burst; math.Abs(got-m.at(now)) > 1e-9 || got < floor || got > l.Burst {
				t.Fatalf("step %d: bucket %v: %v tokens, model %v (within %v and %v)", step, all[i].Key, got, m.at(now), floor, l.Burst)
			}
			if got < 0 {
				stats.inDebt++
			}
			lg := ledgers[i]
			if want := lg.base + lg.refilled - lg.charged; math.Abs(got-want) > 1e-6 {
				t.Fatalf("step %d: bucket %v: %v tokens, want %v: %v, refilled %v, charged %v since a bound last cut", step, all[i].Key, got, want, lg.base, lg.refilled, lg.charged)
			}
		}
	}
	t.Logf("%+v", stats)
	if stats.admitted < 100 || stats.refused < 100 || stats.inDebt < 100 || stats.debtRefusals < 20 || stats.cut == 0 || stats.windowSettled < 20 {
		t.Errorf("the stream tests too little: %+v", stats)
	}
}

// TestSettleChargesWhatWasUsed: requests reserve and settle out of order
// on a bucket that no bound cuts, on a clock that stands still: it ends
// charged exactly what they used, and a refund of a full bucket leaves it
// full.
func TestSettleChargesWhatWasUsed(t *testing.T) {
	s := settleStore()
	rng := rand.New(rand.NewPCG(7, 8))
	k := BucketKey{Tenant: "acme"}
	l := Limit{Rate: 1, Burst: 1e5}
	type request struct{ reserve, used float64 }
	var open []request
	sum := 0.0
	for i := range 400 {
		if len(open) == 0 || rng.IntN(2) == 0 {
			r := request{reserve: float64(1 + rng.IntN(5)), used: float64(rng.IntN(11))}
			if res := s.TakeAt(0, k, l, r.reserve); !res.Allowed {
				t.Fatalf("reservation %d refused: %+v", i, res)
			}
			open = append(open, r)
			continue
		}
		n := rng.IntN(len(open))
		r := open[n]
		open = append(open[:n], open[n+1:]...)
		if err := s.SettleAt(0, fmt.Sprint("req-", i), []Take{{Key: k, Limit: l, Cost: r.used - r.reserve}}); err != nil {
			t.Fatal(err)
		}
		sum += r.used
	}
	for _, r := range open {
		sum += r.reserve
	}
	if got, want := tokensOf(s, k, l, 0), l.Burst-sum; got != want {
		t.Errorf("tokens %v, want %v: the burst less what was used (or reserved, if open)", got, want)
	}

	full := BucketKey{Tenant: "full"}
	if err := s.SettleAt(0, "refund", []Take{{Key: full, Limit: l, Cost: -5}}); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := stateOf(s, full); ok {
		t.Error("a refund of a bucket never seen stored it: it is full, the same as never seen")
	}
}

// TestSettleDebt: a settlement charges a bucket into debt, down to
// −Burst and no further; while in debt a take is refused until the
// refill has repaid the debt and the cost; and a sweep keeps the bucket
// until it is full again, counting the debt, where one full from empty
// would have been dropped.
func TestSettleDebt(t *testing.T) {
	s := settleStore()
	k := BucketKey{Tenant: "acme"}
	l := Limit{Rate: 2, Burst: 10}
	if r := s.TakeAt(0, k, l, 4); !r.Allowed {
		t.Fatalf("reservation refused: %+v", r)
	}
	if err := s.SettleAt(0, "req-1", []Take{{Key: k, Limit: l, Cost: 30}}); err != nil {
		t.Fatal(err)
	}
	if got := tokensOf(s, k, l, 0); got != -l.Burst {
		t.Fatalf("tokens after a charge of 30 on 6: %v, want %v (the floor)", got, -l.Burst)
	}
	// Full again after 10 s; had it held the 6 left by the reservation,
	// after 2 s.
	s.Sweep(int64(3 * time.Second))
	if s.Len() != 1 {
		t.Fatalf("a bucket in debt was swept at 3 s, before it is full again")
	}
	r := s.TakeAt(0, k, l, 1)
	if want := secondsToDuration((l.Burst + 1) / l.Rate); r.Allowed || r.RetryAfter != want {
		t.Errorf("take in debt: %+v, want refused, RetryAfter %v (the debt and the cost repaid)", r, want)
	}
	if r := s.TakeAt(int64(5500*time.Millisecond)-1, k, l, 1); r.Allowed {
		t.Errorf("take just before the debt and cost are repaid admitted: %+v", r)
	}
	if r := s.TakeAt(int64(5500*time.Millisecond), k, l, 1); !r.Allowed {
		t.Errorf("take once the debt and cost are repaid refused: %+v", r)
	}
	// Empty at 5.5 s: full again at 10.5 s.
	s.Sweep(int64(10500 * time.Millisecond))
	if s.Len() != 0 {
		t.Errorf("Len %d after the bucket is full again, want 0", s.Len())
	}
}

// TestSettleWindow: a settlement counts in its window while it runs,
// within 0 and 2 × Burst; once the window is over, or for a window never
// seen or a later window's state, it does nothing.
func TestSettleWindow(t *testing.T) {
	s := settleStore()
	k := BucketKey{Tenant: "acme", Scope: "daily"}
	// It ends before the store's first sweep after 0 (an hour on), so
	// its state is still there when it is over.
	l := Limit{Rate: 10.0 / 3600, Burst: 10, End: int64(30 * time.Minute)}
	used := func() float64 {
		t.Helper()
		b, fixed, ok := stateOf(s, k)
		if !ok || !fixed {
			t.Fatalf("no window state for %v", k)
		}
		return b.tokens
	}
	settle := func(now int64, l Limit, cost float64) {
		t.Helper()
		if err := s.SettleAt(now, "req", []Take{{Key: k, Limit: l, Cost: cost}}); err != nil {
			t.Fatal(err)
		}
	}
	settle(0, l, 3)
	if s.Len() != 0 {
		t.Fatal("a settlement of a window never seen stored it")
	}
	if r := s.TakeAt(0, k, l, 2); !r.Allowed {
		t.Fatalf("take refused: %+v", r)
	}
	for _, c := range []struct{ cost, want float64 }{{3, 5}, {-1, 4}, {-10, 0}, {100, 20}, {1, 21}, {-2, 19}} {
		settle(int64(time.Minute), l, c.cost)
		if got := used(); got != c.want {
			t.Errorf("settle %v: %v used, want %v", c.cost, got, c.want)
		}
	}
	if r := s.TakeAt(int64(time.Minute), k, l, 1); r.Allowed || r.RetryAfter != 29*time.Minute {
		t.Errorf("take from a window used beyond its burst: %+v, want refused until its end", r)
	}
	settle(l.End, l, -18)
	if got := used(); got != 19 {
		t.Errorf("settle at the window's end: %v used, want 19 (the window is over)", got)
	}
	next := l
	next.End += int64(time.Hour)
	if r := s.TakeAt(l.End, k, next, 1); !r.Allowed {
		t.Fatalf("take of the next window refused: %+v", r)
	}
	settle(l.End, l, 5)
	if got := used(); got != 1 {
		t.Errorf("settle of the window before, in the next one: %v used, want 1", got)
	}
}

// TestSettleInvalid: a settlement of a bucket twice, a cost that is not
// finite, an invalid limit, several tenants or no id is refused and
// changes nothing; no takes, or zero costs, change nothing either.
func TestSettleInvalid(t *testing.T) {
	s := settleStore()
	a, b := BucketKey{Tenant: "a"}, BucketKey{Tenant: "b"}
	l := Limit{Rate: 1, Burst: 10}
	cases := []struct {
		name  string
		id    string
		takes []Take
		want  error
	}{
		{"duplicate", "r", []Take{{Key: a, Limit: l, Cost: 1}, {Key: a, Limit: l, Cost: 2}}, ErrDuplicateBucket},
		{"NaN", "r", []Take{{Key: a, Limit: l, Cost: math.NaN()}}, ErrInvalidTake},
		{"+Inf", "r", []Take{{Key: a, Limit: l, Cost: math.Inf(1)}}, ErrInvalidTake},
		{"-Inf", "r", []Take{{Key: a, Limit: l, Cost: math.Inf(-1)}}, ErrInvalidTake},
		{"rate", "r", []Take{{Key: a, Limit: Limit{Burst: 1}, Cost: 1}}, ErrInvalidTake},
		{"end", "r", []Take{{Key: a, Limit: Limit{Rate: 1, Burst: 1, End: -1}, Cost: 1}}, ErrInvalidTake},
		{"tenants", "r", []Take{{Key: a, Limit: l, Cost: 1}, {Key: b, Limit: l, Cost: 1}}, ErrInvalidTake},
		{"no id", "", []Take{{Key: a, Limit: l, Cost: 1}}, ErrInvalidTake},
		{"none", "r", nil, nil},
		{"zero", "r", []Take{{Key: a, Limit: l}, {Key: BucketKey{Tenant: "a", Scope: "x"}, Limit: l}}, nil},
	}
	for _, c := range cases {
		if err := s.Settle(context.Background(), c.id, c.takes); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if s.Len() != 0 {
		t.Errorf("Len %d after invalid or empty settlements, want 0", s.Len())
	}
}

// BenchmarkMemoryStoreSettle is a settlement of a request's two buckets
// (its route group's and the tenant's), a charge and a refund in turn,
// over 1,000 tenants.
func BenchmarkMemoryStoreSettle(b *testing.B) {
	s := NewMemoryStore(MemoryStoreOptions{})
	l := Limit{Rate: 1, Burst: 1e9}
	const n = 1000
	takes := make([][2]Take, n)
	for i := range takes {
		tenant := fmt.Sprint("tenant-", i)
		takes[i] = [2]Take{{Key: BucketKey{Tenant: tenant, Scope: "export"}, Limit: l}, {Key: BucketKey{Tenant: tenant}, Limit: l}}
		for j := range takes[i] {
			s.TakeAt(s.Clock(), takes[i][j].Key, l, 1e6)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	var seq atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		i := seq.Add(7919)
		var ts [2]Take
		for pb.Next() {
			i += 7919
			ts = takes[i%n]
			cost := float64(int(i%2)*2 - 1)
			ts[0].Cost, ts[1].Cost = cost, cost
			if err := s.Settle(context.Background(), "req", ts[:]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
