package admission

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fairgate/fairgate/bulkhead"
	"github.com/fairgate/fairgate/shed"
	"github.com/fairgate/fairgate/tenant"
)

// Issue 11's property test for the shedding layer: over random workloads
// (tenants, weights, pools, costs, criticalities, arrival rates and
// service times), no request of a tenant within its fair share of its pool
// is ever shed, and a tenant alone in its pool is never shed while its use
// is within the pool's seats (work-conserving). The negative control runs
// the same workloads with share-blind shedding, which must break the
// invariant: a within-share tenant shed while another is above its share.
const (
	shedPropSeed  = 20261201
	shedPropCases = 240
)

// shedCase is one random workload.
type shedCase struct {
	total   int
	pools   map[string]bulkhead.PoolConfig
	tiers   map[string]tenant.TierConfig
	tenants []tenant.TenantConfig
	routes  []RouteConfig
	loads   []shedLoad
	lone    bool // one tenant only
}

// shedLoad is a tenant's traffic: Poisson arrivals at rate per second,
// each request on a route drawn by mix, holding its seat for service.
type shedLoad struct {
	key     string
	pool    string
	rate    float64
	mix     [3]float64 // cumulative: critical, default, sheddable
	service time.Duration
}

// newShedCase draws case i's workload from rng.
func newShedCase(rng *rand.Rand) shedCase {
	c := shedCase{total: 2 + rng.IntN(7), pools: map[string]bulkhead.PoolConfig{}, tiers: map[string]tenant.TierConfig{}}
	npools := 1 + rng.IntN(2)
	for p := range npools {
		c.pools[fmt.Sprintf("p%d", p)] = bulkhead.PoolConfig{Share: 1 + rng.IntN(3), QueueLength: 2 + rng.IntN(15), MaxWait: time.Second}
	}
	for i, crit := range []shed.Criticality{shed.Critical, shed.Default, shed.Sheddable} {
		c.routes = append(c.routes, RouteConfig{Method: "GET", Path: fmt.Sprintf("/r%d", i), Cost: float64(1 + rng.IntN(10)), Criticality: crit})
	}
	n := 1 + rng.IntN(5)
	c.lone = n == 1
	for i := range n {
		id, tier, pool := fmt.Sprintf("t%d", i), fmt.Sprintf("tier%d", i), fmt.Sprintf("p%d", rng.IntN(npools))
		c.tiers[tier] = tenant.TierConfig{Rate: 1e9, Burst: 1e9, Pool: pool, Weight: []float64{0.5, 1, 2, 4}[rng.IntN(4)]}
		c.tenants = append(c.tenants, tenant.TenantConfig{ID: id, Tier: tier, APIKeysSHA256: []string{tenant.HashKey(id + "-key")}})
		a, b := rng.Float64(), rng.Float64()
		lo, hi := min(a, b), max(a, b)
		c.loads = append(c.loads, shedLoad{key: id + "-key", pool: pool,
			rate:    math.Exp(math.Log(2) + rng.Float64()*math.Log(150)), // 2 to 300 a second
			mix:     [3]float64{lo, hi, 1},
			service: time.Duration(10+rng.IntN(190)) * time.Millisecond})
	}
	return c
}

// shedArrival is one request of a case.
type shedArrival struct {
	at    time.Duration
	load  int
	route int
}

// arrivals draws the case's requests over dur, in time order.
func (c *shedCase) arrivals(rng *rand.Rand, dur time.Duration) []shedArrival {
	var out []shedArrival
	for i, l := range c.loads {
		for at := time.Duration(rng.ExpFloat64() / l.rate * 1e9); at < dur; at += time.Duration(rng.ExpFloat64() / l.rate * 1e9) {
			u := rng.Float64()
			out = append(out, shedArrival{at: at, load: i, route: slices.IndexFunc(l.mix[:], func(m float64) bool { return u < m })})
		}
	}
	slices.SortStableFunc(out, func(a, b shedArrival) int { return int(a.at - b.at) })
	return out
}

// shedRun is what one case's run saw.
type shedRun struct {
	sheds int
	// unfair counts sheds of a tenant within its share; unfairWhileAbove
	// those while another tenant of the pool was above its own share (the
	// invariant's violations); loneBelow sheds of a lone tenant whose use
	// was within the pool's seats.
	unfair, unfairWhileAbove, loneBelow int
	first                               string // the first violation, for the message
}

// run drives c's arrivals through a gate (share-blind shedding when blind)
// in a synctest bubble. Before each decision the bubble is settled, the
// pool's share state read (bulkhead.Pools.Share, the shedding layer's own
// measure), then the decision made and settled again: nothing else runs
// between the reading and the decision, so the reading is what the layer
// saw.
func (c *shedCase) run(t *testing.T, arrivals []shedArrival, blind bool) shedRun {
	t.Helper()
	reg, err := tenant.NewRegistry(tenant.Config{Tiers: c.tiers, Tenants: c.tenants})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Routes: c.routes,
		Bulkhead: &bulkhead.Config{Total: c.total, Pools: c.pools},
		Shedding: &shed.SheddingConfig{CalibrationInterval: 200 * time.Millisecond},
	}
	g := newGateWithout(t, cfg, reg, Options{Now: time.Now}, offIf(blind, shedByShare))
	var out shedRun
	var wg sync.WaitGroup
	start := time.Now()
	for _, a := range arrivals {
		time.Sleep(time.Until(start.Add(a.at)))
		synctest.Wait()
		l := c.loads[a.load]
		id := c.tenants[a.load].ID
		above := false
		for j, o := range c.loads {
			if j != a.load && o.pool == l.pool && !g.pools.Share(o.pool, c.tenants[j].ID).Within {
				above = true
			}
		}
		st, _ := g.pools.Stats(l.pool)
		seats := float64(st.Seats - st.Lent + st.Borrowed)
		decided := make(chan Decision, 1)
		wg.Go(func() {
			d, err := g.Check(context.Background(), req(l.key, "GET", c.routes[a.route].Path))
			if err != nil {
				t.Error(err)
			}
			decided <- d
			serveFor(d, l.service)
		})
		synctest.Wait() // shed or rejected: decided; else holding or queued for a seat
		var d Decision
		select {
		case d = <-decided:
		default:
			continue
		}
		if d.Layer != LayerShed {
			continue
		}
		out.sheds++
		// What the shedding layer judged: the tenant's use with this
		// request's arrival counted (bulkhead.Pools.Arrive); a shed
		// request changes nothing after that.
		self := g.pools.Share(l.pool, id)
		what := fmt.Sprintf("at %v %s (%s) shed: use %.2f, share %.2f, another above share %v", a.at, id, c.routes[a.route].Criticality, self.Use, self.Share, above)
		if self.Within {
			out.unfair++
			if above {
				out.unfairWhileAbove++
			}
			if out.first == "" {
				out.first = what
			}
		}
		if c.lone && self.Use <= seats {
			out.loneBelow++
			if out.first == "" {
				out.first = what + fmt.Sprintf(", alone with %v seats", seats)
			}
		}
	}
	wg.Wait()
	return out
}

func TestShedFairShareProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(shedPropSeed, 0))
	const dur = 2 * time.Second
	shedding, violated, lone, loneShed, blindLone := 0, 0, 0, 0, 0
	for i := range shedPropCases {
		c := newShedCase(rng)
		arrivals := c.arrivals(rng, dur)
		if c.lone {
			lone++
		}
		var fair, blind shedRun
		synctest.Test(t, func(t *testing.T) { fair = c.run(t, arrivals, false) })
		synctest.Test(t, func(t *testing.T) { blind = c.run(t, arrivals, true) })
		if fair.unfair > 0 || fair.loneBelow > 0 {
			t.Errorf("case %d (%d tenants, %d seats): %d of %d sheds within share, %d of a lone tenant within its seats; first: %s",
				i, len(c.tenants), c.total, fair.unfair, fair.sheds, fair.loneBelow, fair.first)
		}
		if fair.sheds > 0 {
			shedding++
		}
		if blind.unfairWhileAbove > 0 {
			violated++
		}
		if c.lone {
			loneShed += fair.sheds
			blindLone += blind.loneBelow
		}
	}
	t.Logf("%d cases (seed %d, %d with a lone tenant): %d shed something; share-blind shedding broke the invariant in %d; lone tenants shed %d times above their seats (share-blind: %d times within)",
		shedPropCases, shedPropSeed, lone, shedding, violated, loneShed, blindLone)
	if shedding < shedPropCases/10 {
		t.Errorf("only %d of %d cases shed anything: the workloads test little", shedding, shedPropCases)
	}
	// Negative controls: each property must be able to fail.
	if violated < shedPropCases/20 {
		t.Errorf("share-blind shedding broke the invariant in %d of %d cases; want at least %d", violated, shedPropCases, shedPropCases/20)
	}
	if loneShed == 0 || blindLone == 0 {
		t.Errorf("lone tenants: %d sheds above their seats, %d share-blind within; want both > 0 (else the work-conserving check is idle)", loneShed, blindLone)
	}
}
