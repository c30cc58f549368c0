package fairshare

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// taker is a global backstop under test: the fair Backstop, or the plain
// first-come bucket it replaced (the negative control).
type taker interface {
	take(now int64, l BackstopLimit, tenant string, weight, cost float64) bool
}

type fair struct{ b Backstop }

func (f *fair) take(now int64, l BackstopLimit, tenant string, weight, cost float64) bool {
	return f.b.Take(now, l, BackstopRequest{Tenant: tenant, Weight: weight, Cost: cost}).Allowed
}

// firstCome is one token bucket for everyone: whoever asks first takes.
type firstCome struct {
	tokens  float64
	last    int64
	started bool
}

func (f *firstCome) take(now int64, l BackstopLimit, _ string, _, cost float64) bool {
	if !f.started {
		f.started, f.tokens, f.last = true, l.Burst, now
	}
	f.tokens = min(l.Burst, f.tokens+float64(now-f.last)/1e9*l.Rate)
	f.last = now
	if f.tokens >= cost {
		f.tokens -= cost
		return true
	}
	return false
}

// load is one tenant's traffic in a simulation: Poisson arrivals of cost.
type load struct {
	id     string
	weight float64
	rate   float64 // requests a second
	cost   float64
	start  time.Duration
}

// outcome counts one tenant's requests in a simulation.
type outcome struct{ sent, admitted int }

func (o outcome) share() float64 { return float64(o.admitted) / float64(max(o.sent, 1)) }

// violation is a refusal of a tenant within its fair share while another
// tenant was above its own, by the reference accounting. A request is
// within its tenant's share when admitting it keeps the tenant's recent
// admitted rate inside the share.
type violation struct {
	at     time.Duration
	tenant string
	use    float64
	share  float64
}

// simulate runs loads against g for dur in steps of 1 ms and reports each
// tenant's outcome and the first violation of the fairness invariant, judged
// by a reference that recomputes every tenant's decayed rates and the
// max-min level from scratch at each refusal. slack is the fraction of its
// share a refused tenant may be below it (the level is recomputed every
// Window/50 and so lags; rates are estimates). A load with a start begins
// sending then.
func simulate(g taker, l BackstopLimit, loads []load, dur time.Duration, seed uint64, slack float64) (map[string]outcome, *violation) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	tau := l.Window.Seconds()
	out := map[string]outcome{}
	demand := make([]Rate, len(loads))
	admitted := make([]Rate, len(loads))
	next := make([]int64, len(loads))
	for i, ld := range loads {
		next[i] = int64(ld.start) + int64(rng.ExpFloat64()/ld.rate*1e9)
	}
	var first *violation
	ds := make([]Demand, len(loads))
	// Recent use is defined once a window has passed; the first two are
	// not judged.
	warmup := 2 * int64(l.Window)
	for now := int64(0); now < int64(dur); now += int64(time.Millisecond) {
		for i, ld := range loads {
			for next[i] <= now {
				next[i] += int64(rng.ExpFloat64()/ld.rate*1e9) + 1
				o := out[ld.id]
				o.sent++
				demand[i].Add(now, tau, ld.cost)
				if g.take(now, l, ld.id, ld.weight, ld.cost) {
					o.admitted++
					admitted[i].Add(now, tau, ld.cost)
				} else if first == nil && now >= warmup {
					for j := range loads {
						ds[j] = Demand{Use: demand[j].At(now, tau), Weight: loads[j].weight}
					}
					lambda := refLevel(ShareOf*l.Rate, append(ds[:0:0], ds...))
					use := admitted[i].At(now, tau)
					// Within its share for this request: admitting it
					// keeps the tenant inside its share.
					within := use+ld.cost/tau <= (1-slack)*lambda*ld.weight
					otherAbove := false
					for j := range loads {
						if j != i && admitted[j].At(now, tau) > lambda*loads[j].weight {
							otherAbove = true
						}
					}
					if within && otherAbove {
						first = &violation{at: time.Duration(now), tenant: ld.id, use: use, share: lambda * ld.weight}
					}
				}
				out[ld.id] = o
			}
		}
	}
	return out, first
}

// demoBackstop is deploy/examples/demo.yaml's global backstop.
var demoBackstop = BackstopLimit{Rate: 100, Burst: 600, Window: time.Second}

// The demo's situation: the enterprise tenant alone sends its own quota
// (100 tokens/s), the whole global rate, from 10 s on; pro and starter
// tenants send exactly theirs (20 and 5 tokens/s, in cost-5 requests).
func demoLoads() []load {
	return []load{
		{id: "acme", weight: 1, rate: 100, cost: 1, start: 10 * time.Second},
		{id: "globex", weight: 1, rate: 4, cost: 5},
		{id: "initech", weight: 1, rate: 1, cost: 5},
	}
}

func TestBackstopLightTenantsInsideTheirShare(t *testing.T) {
	out, v := simulate(&fair{}, demoBackstop, demoLoads(), 120*time.Second, 1, 0.05)
	if v != nil {
		t.Errorf("invariant broken: %+v", *v)
	}
	for _, id := range []string{"globex", "initech"} {
		if got := out[id].share(); got < 0.99 {
			t.Errorf("%s admitted %.1f%% of %d, want ≥ 99%%", id, 100*got, out[id].sent)
		}
	}
	// acme takes what the others leave: 100 − 20 − 5 = 75 tokens/s.
	if got := float64(out["acme"].admitted) / 110; got < 70 || got > 81 {
		t.Errorf("acme admitted %.1f tokens/s, want about 75 (its share: 90 − 25 = 65, and the rest)", got)
	}
}

// Negative control: the first-come bucket it replaced starves the light
// tenants, so the test above can fail.
func TestBackstopFirstComeStarvesLightTenants(t *testing.T) {
	out, v := simulate(&firstCome{}, demoBackstop, demoLoads(), 120*time.Second, 1, 0.05)
	if v == nil {
		t.Error("first-come bucket kept the invariant; the simulation cannot tell fair from unfair")
	}
	if got := out["initech"].share(); got >= 0.99 {
		t.Errorf("first-come: initech admitted %.1f%%; the light tenants' check cannot fail", 100*got)
	}
}

// A lone tenant may use the whole capacity.
func TestBackstopWorkConserving(t *testing.T) {
	l := BackstopLimit{Rate: 200, Burst: 200, Window: time.Second}
	out, _ := simulate(&fair{}, l, []load{{id: "a", weight: 1, rate: 400, cost: 1}}, 60*time.Second, 3, 0)
	if got := float64(out["a"].admitted) / 60; got < 0.97*l.Rate || got > l.Rate+l.Burst/60+1 {
		t.Errorf("lone tenant admitted %.1f tokens/s, want about %v", got, l.Rate)
	}
}

// The invariant over random workloads: random tenants, weights, costs and
// arrival rates, light and heavy; no refusal of a tenant within its share
// while another is above its own, and a lone heavy tenant gets everything.
func TestBackstopProperty(t *testing.T) {
	const cases, seed = 240, 20261130
	rng := rand.New(rand.NewPCG(seed, 1))
	costs := []float64{1, 1, 2, 5, 10, 20}
	violations := 0
	for c := range cases {
		l := BackstopLimit{Rate: 50 + rng.Float64()*450, Window: time.Duration(500+rng.IntN(1500)) * time.Millisecond}
		l.Burst = math.Max(40, l.Rate*(0.5+rng.Float64()*2.5))
		n := 1 + rng.IntN(8)
		loads := make([]load, n)
		for i := range loads {
			cost := costs[rng.IntN(len(costs))]
			tokens := l.Rate * (0.02 + rng.Float64()*0.3) // light
			if rng.IntN(3) == 0 {
				tokens = l.Rate * (0.5 + rng.Float64()*3) // heavy
			}
			loads[i] = load{id: string(rune('a' + i)), weight: 0.5 + rng.Float64()*3.5, rate: tokens / cost, cost: cost}
		}
		out, v := simulate(&fair{}, l, loads, 20*time.Second, uint64(c)+seed, 0.05)
		if v != nil {
			violations++
			t.Errorf("case %d (%+v, %+v): %+v", c, l, loads, *v)
		}
		if n == 1 && loads[0].rate*loads[0].cost > 1.2*l.Rate {
			if got := float64(out["a"].admitted) * loads[0].cost / 20; got < 0.95*l.Rate {
				t.Errorf("case %d: lone tenant admitted %.1f tokens/s of %.1f", c, got, l.Rate)
			}
		}
	}
	t.Logf("%d cases (seed %d), %d violations", cases, seed, violations)
}

// Negative control of the property: over the same random workloads the
// first-come bucket breaks the invariant.
func TestBackstopPropertyFirstComeFails(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 1))
	broken := 0
	for c := range 40 {
		l := BackstopLimit{Rate: 100, Burst: 100, Window: time.Second}
		loads := []load{{id: "heavy", weight: 1, rate: 300, cost: 1}, {id: "light", weight: 1, rate: 2 + rng.Float64()*5, cost: 5}}
		if _, v := simulate(&firstCome{}, l, loads, 10*time.Second, uint64(c), 0.05); v != nil {
			broken++
		}
	}
	if broken == 0 {
		t.Error("the first-come bucket never broke the invariant: the property test cannot fail")
	}
}

func BenchmarkBackstopTake(b *testing.B) {
	b.ReportAllocs()
	var bs Backstop
	l := BackstopLimit{Rate: 1e6, Burst: 1e6, Window: time.Second}
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	now := int64(0)
	for i := 0; b.Loop(); i++ {
		now += 1000
		bs.Take(now, l, BackstopRequest{Tenant: ids[i&7], Weight: 1, Cost: 1})
	}
}

// Within an above-share tenant the least important requests are refused
// first: three heavy tenants together at 1.5 times the rate, each 55% critical,
// 25% default, 20% sheddable, keep their critical requests; with every
// request in one class (the negative control) critical ones are refused as
// often as the rest.
func TestBackstopClassesWithinATenant(t *testing.T) {
	l := BackstopLimit{Rate: 300, Burst: 300, Window: time.Second}
	run := func(classes bool) map[Class]outcome {
		var b Backstop
		rng := rand.New(rand.NewPCG(3, 4))
		out := map[Class]outcome{}
		for now := int64(0); now < int64(60*time.Second); now += int64(time.Millisecond) {
			for _, id := range []string{"a", "b", "c"} {
				if rng.Float64() >= 0.15 { // 150 requests a second each
					continue
				}
				c := Critical
				if x := rng.Float64(); x >= 0.8 {
					c = Sheddable
				} else if x >= 0.55 {
					c = Default
				}
				r := BackstopRequest{Tenant: id, Weight: 1, Cost: 1}
				if classes {
					r.Class = c
				}
				o := out[c]
				o.sent++
				if b.Take(now, l, r).Allowed {
					o.admitted++
				}
				out[c] = o
			}
		}
		return out
	}
	got := run(true)
	t.Logf("classes: critical %+v, default %+v, sheddable %+v", got[Critical], got[Default], got[Sheddable])
	if got[Critical].share() < 0.99 || got[Sheddable].share() > got[Default].share() {
		t.Errorf("critical %.1f%%, default %.1f%%, sheddable %.1f%%; want critical ≥ 99%% and sheddable refused first",
			100*got[Critical].share(), 100*got[Default].share(), 100*got[Sheddable].share())
	}
	one := run(false)
	if one[Critical].share() >= 0.99 {
		t.Errorf("one class: critical %.1f%%; the test above cannot fail", 100*one[Critical].share())
	}
}
