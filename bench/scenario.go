package bench

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/fairgate/fairgate/admission/gateway"
	"github.com/fairgate/fairgate/internal/demoapi"
	"github.com/fairgate/fairgate/shed"
	"github.com/fairgate/fairgate/tenant"
)

// Scenario is a named overload situation: an upstream, tenants with their
// loads, and the settings of the alternatives fairgate is compared with.
type Scenario struct {
	Name        string
	Description string
	Upstream    demoapi.Config
	Tenants     []TenantLoad
	// GlobalBurst scales the global mode's bucket: burst = rate ×
	// GlobalBurst seconds. Its rate is computed (globalRate).
	GlobalBurst float64
	// IPRate and IPBurst are the ip mode's per-address bucket, in requests.
	IPRate, IPBurst float64
	// GlobalTokens is the fairgate config's global backstop rate in tokens
	// per second (burst twice that). Zero means no backstop.
	GlobalTokens float64
	// Baseline is the mode of the quiet baseline run: None (the plain
	// proxy) unless the scenario measures the proxy itself.
	Baseline Mode
	// Targets are what every innocent tenant must get in a protected mode;
	// the none mode must miss them. Zero judges nothing.
	Targets Targets
	// DefaultModes replaces DefaultModes() for this scenario when set.
	DefaultModes []Mode
	// unlimited lifts every tenant quota and cap in the gateway config
	// (the overhead scenario measures the proxy, not the limits).
	unlimited bool
	// config replaces benchConfig as the gateway config's head (the
	// usage scenario's completion routes and tiers).
	config string
}

// globalRate is the global mode's request rate: the upstream's capacity
// (connections ÷ mean service time) for the scenario's offered mix at its
// peak, 90% of it for headroom. That is the best a global request-count
// limit can be tuned, knowing the traffic in advance.
func (s *Scenario) globalRate() float64 {
	up := demoapi.New(s.Upstream)
	var reqs, work float64
	for _, tl := range s.Tenants {
		r := tl.peakRate()
		reqs += r
		work += r * tl.meanServiceTime(up)
	}
	if work == 0 {
		return 1
	}
	return 0.9 * float64(up.Connections()) * reqs / work
}

// innocentOnly returns s with only its innocent tenants: the quiet
// baseline.
func (s Scenario) innocentOnly() Scenario {
	s.Tenants = slices.DeleteFunc(slices.Clone(s.Tenants), func(t TenantLoad) bool { return t.Role != Innocent })
	return s
}

// benchConfig is the gateway config every scenario shares, with the
// tenants, the global backstop and the upstream filled in. Quotas are in
// tokens; a route's cost is its price (users/me 1, search 2, export 10).
const benchConfig = `
upstream: %s
server:
  upstream_timeout: 30s
tiers:
  enterprise: {burst: 400, rate: 200, max_concurrent: 6, rank: 2}
  pro:        {burst: 120, rate: 60,  max_concurrent: 4, rank: 1}
  starter:    {burst: 30,  rate: 15,  max_concurrent: 2, rank: 0}
routes:
  - {method: GET,  path: /api/v1/users/me,       cost: 1,  criticality: critical}
  - {method: GET,  path: /api/v1/search,         cost: 2,  criticality: default}
  - {method: POST, path: /api/v1/reports/export, cost: 10, criticality: sheddable}
  - {method: GET,  path: /api/v1/orders,         cost: 1,  criticality: default}
# The upstream's 8 connections, one pool per tier. Every pool may borrow
# idle seats; a flood borrows only beyond the seats its pool's lighter
# tenants need (their headroom), so it stays in its own pool.
bulkhead:
  total: 8
  pools:
    enterprise: {share: 50, lendable_percent: 50, borrowing_percent: 50, queue_length: 32, max_wait: 1s}
    pro:        {share: 30, lendable_percent: 50, borrowing_percent: 50, queue_length: 16, max_wait: 1s}
    starter:    {share: 20, lendable_percent: 50, borrowing_percent: 50, queue_length: 4,  max_wait: 500ms}
shedding: {calibration_interval: 1s}
# The total above is the start; the pools divide what the adaptive limit
# learns from upstream latency.
adaptive: {min: 4, max: 32, initial: 8, max_latency: 1500ms}
tenants:
`

// GatewayConfig returns the fairgate config of s, proxying to upstream.
func (s *Scenario) GatewayConfig(upstream string) (gateway.Config, error) {
	var b strings.Builder
	fmt.Fprintf(&b, cmp.Or(s.config, benchConfig), upstream)
	for _, tl := range s.Tenants {
		fmt.Fprintf(&b, "  - {id: %s, tier: %s, api_keys_sha256: [%s]", tl.ID, tl.Tier, tenant.HashKey(tl.Key))
		switch {
		case s.unlimited:
			b.WriteString(", rate: 1000000, burst: 1000000, max_concurrent: 0")
		case tl.Contract != nil:
			fmt.Fprintf(&b, ", rate: %g, burst: %g", tl.Contract.Rate, tl.Contract.Burst)
			if tl.Contract.MaxConcurrent > 0 {
				fmt.Fprintf(&b, ", max_concurrent: %d", tl.Contract.MaxConcurrent)
			}
		}
		b.WriteString("}\n")
	}
	if s.GlobalTokens > 0 {
		fmt.Fprintf(&b, "global: {burst: %g, rate: %g}\n", 2*s.GlobalTokens, s.GlobalTokens)
	}
	cfg, err := gateway.Parse([]byte(b.String()))
	if err != nil {
		return cfg, fmt.Errorf("bench: scenario %s: gateway config: %w", s.Name, err)
	}
	return cfg, nil
}

// The route mixes the scenarios use.
var (
	usersMe = Call{Method: "GET", Path: "/api/v1/users/me", Criticality: shed.Critical}
	search  = Call{Method: "GET", Path: "/api/v1/search", Criticality: shed.Default}
	export  = Call{Method: "POST", Path: "/api/v1/reports/export", Criticality: shed.Sheddable}
)

func weighted(c Call, w float64) Call { c.Weight = w; return c }

// interactive is what a tenant's users do: mostly cheap reads, some
// searches. Mean service time 9.5 ms.
func interactive() []Call { return []Call{weighted(usersMe, 70), weighted(search, 30)} }

// innocentTenant is a well-behaved tenant: Poisson arrivals, a 2 s client
// timeout, Retry-After honoured.
func innocentTenant(id, tier string, rate float64, users, ips int) TenantLoad {
	return TenantLoad{ID: id, Tier: tier, Key: "bench-" + id + "-key", Role: Innocent, Rate: rate,
		Calls: interactive(), Users: users, IPs: ips, Timeout: 2 * time.Second, HonourRetryAfter: true}
}

// innocents are the steady tenants of noisy-neighbour and slow-export:
// together about 11% of an 8-connection upstream, each well within quota
// (acme ~78 of 200 tokens/s, globex ~39 of 60, hooli ~4 of 15).
func innocents() []TenantLoad {
	return []TenantLoad{
		innocentTenant("acme", "enterprise", 60, 200, 20),
		innocentTenant("globex", "pro", 30, 50, 10),
		innocentTenant("hooli", "starter", 3, 5, 2),
	}
}

// Scenario names, in the order --scenario all runs them.
var scenarioNames = []string{"noisy-neighbour", "slow-export", "overload", "nat", "same-tier", "two-tier-flood", "burst-gaming", "slow-cheap", "backstop", "many-tenants", retryStorm, "usage"}

// ScenarioNames returns the names Lookup knows.
func ScenarioNames() []string { return slices.Clone(scenarioNames) }

// Lookup returns the named scenario. seed picks what a scenario draws at
// random (many-tenants' noisy tenants); 0 means 1, as in Options.
func Lookup(name string, seed uint64) (Scenario, error) {
	if seed == 0 {
		seed = 1
	}
	up := demoapi.Config{Connections: 8}
	base := Scenario{Name: name, Upstream: up, GlobalBurst: 0.5, IPRate: 10, IPBurst: 20, GlobalTokens: 400, Targets: defaultTargets}
	switch name {
	case "noisy-neighbour":
		// initech's quota is 15 tokens/s; its mix costs 7.6 tokens a
		// request, so 50× the quota is ~99 requests/s, of which 70% are
		// 300 ms exports: ~21 connection-seconds a second against the
		// upstream's 8, with the innocents' ~0.9: about 2.8× capacity.
		s := base
		s.Description = "Innocent tenants at steady rates well within quota; starter tenant initech ramps from its quota to 50× it (70% exports) from 10% to 40% of the run, from 4 addresses, ignoring Retry-After. Offered load at the peak is about 2.8× the upstream's capacity."
		s.Tenants = append(innocents(), TenantLoad{ID: "initech", Tier: "starter", Key: "bench-initech-key", Role: Noisy,
			Rate: 15.0 / 7.6, Ramp: &Ramp{Start: 0.1, Peak: 0.4, From: 1, To: 50}, Arrivals: Constant,
			Calls: []Call{weighted(export, 70), weighted(search, 30)}, Users: 4, IPs: 4, Timeout: 10 * time.Second})
		return s, nil
	case "slow-export":
		// umbrella sends 5 exports a second (50 tokens/s, within the pro
		// quota of 60) but each asks for 10 000 rows: 3 s of a connection,
		// 15 connection-seconds a second against 8. Rate limits cannot see
		// it; a concurrency cap can.
		s := base
		s.Description = "Pro tenant umbrella stays within its rate quota (5 exports/s = 50 of 60 tokens/s) but each export is un-paginated (10 000 rows, ~3 s of a database connection): ~15 connection-seconds a second against 8, from 40% of the run. Rate limits alone cannot see it."
		s.Tenants = append(innocents(), TenantLoad{ID: "umbrella", Tier: "pro", Key: "bench-umbrella-key", Role: Noisy,
			Rate: 5, Ramp: &Ramp{Start: 0.1, Peak: 0.4, From: 0.2, To: 1}, Arrivals: Constant,
			Calls: []Call{weighted(Call{Method: "POST", Path: "/api/v1/reports/export?rows=10000", Criticality: shed.Sheddable}, 1)},
			Users: 8, IPs: 2, Timeout: 30 * time.Second})
		return s, nil
	case "overload":
		// Everyone within quota, but the quotas add up to more than the
		// upstream: three enterprise tenants ramp to 95% of their quotas
		// with a mix of all three criticalities (20% exports: 3.05 tokens
		// and 68 ms of a connection a request): ~62 requests/s and ~4.2
		// connection-seconds a second each; with the innocents ~1.7×
		// capacity.
		s := base
		s.Targets.MaxP99Ratio = 1.5 // a genuine overload: some queueing is fair
		s.Targets.MinCriticalPct = 99.9
		s.Targets.MinPeakBusyPct = 90
		s.Description = "Every tenant within its quota, but together beyond capacity: enterprise tenants wayne, stark and wonka ramp to 95% of their quotas with mixed criticalities (55% critical reads, 25% searches, 20% sheddable exports), honouring Retry-After; total ~1.7× capacity. No tenant misbehaves: only a global limit and shedding by criticality can help."
		mixed := []Call{weighted(usersMe, 55), weighted(search, 25), weighted(export, 20)}
		s.Tenants = innocents()
		for _, id := range []string{"wayne", "stark", "wonka"} {
			s.Tenants = append(s.Tenants, TenantLoad{ID: id, Tier: "enterprise", Key: "bench-" + id + "-key", Role: Noisy,
				Rate: 0.95 * 200 / 3.05, Ramp: &Ramp{Start: 0.1, Peak: 0.4, From: 0.1, To: 1}, Calls: mixed,
				Users: 300, IPs: 30, Timeout: 5 * time.Second, HonourRetryAfter: true})
		}
		return s, nil
	case "nat":
		// acme's 500 users share one office NAT address: 100 requests/s
		// from one IP, within acme's enterprise quota. initech's script
		// runs on 100 addresses at 1 request/s each — under any per-IP
		// limit — and 50× its quota in total.
		s := base
		s.Description = "500 users of enterprise tenant acme behind one NAT address (0.2 req/s each, 100 req/s, within quota), plus starter tenant initech ramping to 50× its quota spread over 100 addresses (~1 req/s each). Per-IP limits throttle the office and miss the spread-out script."
		acme := innocentTenant("acme", "enterprise", 100, 500, 1)
		s.Tenants = []TenantLoad{acme, innocentTenant("globex", "pro", 30, 50, 10),
			{ID: "initech", Tier: "starter", Key: "bench-initech-key", Role: Noisy,
				Rate: 15.0 / 7.6, Ramp: &Ramp{Start: 0.1, Peak: 0.4, From: 1, To: 50},
				Calls: []Call{weighted(export, 70), weighted(search, 30)}, Users: 100, IPs: 100, Timeout: 10 * time.Second}}
		return s, nil
	case "same-tier":
		// Three pro tenants share the pro pool (30% of the 8 seats, half as
		// much again when borrowing). umbrella's contract lifts its quota to
		// 1000 tokens/s and its cap to 16; it ramps to 450 searches/s (cost
		// 2: 900 tokens/s, within it), 20 ms each: 9 connection-seconds a
		// second against the pool's ~3 seats and the upstream's 8. Neither
		// its rate limit nor its cap binds, and there is no global backstop:
		// the pool's queue builds, and only fair queuing and shedding that
		// sees tenants keep the quiet pro tenants whole.
		s := base
		s.GlobalTokens = 0
		s.Description = "Three pro tenants share the pro pool. umbrella's contract lifts its quota to 1000 tokens/s and its concurrency cap to 16, and it floods searches (default criticality, 20 ms each) inside it, ramping to 450/s (900 tokens/s) from 10% to 40% of the run, ignoring Retry-After: ~9 connection-seconds a second against the pool's ~3 seats and the upstream's 8. globex and soylent, pro tenants at 30 and 10 requests/s, are the innocents."
		s.Tenants = []TenantLoad{
			innocentTenant("globex", "pro", 30, 50, 10),
			innocentTenant("soylent", "pro", 10, 20, 4),
			{ID: "umbrella", Tier: "pro", Key: "bench-umbrella-key", Contract: &Contract{Rate: 1000, Burst: 1000, MaxConcurrent: 16}, Role: Noisy,
				Rate: 450, Ramp: &Ramp{Start: 0.1, Peak: 0.4, From: 0.1, To: 1}, Calls: []Call{weighted(search, 1)},
				Users: 40, IPs: 40, Timeout: 5 * time.Second},
		}
		return s, nil
	case "two-tier-flood":
		// In each of two tiers a tenant floods exports inside its
		// contract (wayne 60/s, umbrella 40/s: 600 and 400 of 1000
		// tokens/s), 300 ms each: 30 connection-seconds a second against
		// 8, while a quiet tenant of the same tier sends its users' reads.
		// Neither flood is over any limit of its own; only the pools'
		// fair division between the tenants of a tier keeps the quiet
		// ones' reads from waiting behind their neighbours' exports.
		return base.besideQuiet("A noisy tenant in each of two tiers at once: enterprise wayne floods exports at 60/s and pro umbrella at 40/s (300 ms each; 600 and 400 tokens/s, inside their contracts of 1000 tokens/s and 16 concurrent), ramping from 10% to 40% of the run, ignoring Retry-After: ~30 connection-seconds a second against 8. acme (enterprise) and globex (pro), quiet tenants of the same tiers, are the innocents.",
			exportFlood("wayne", "enterprise", 60), exportFlood("umbrella", "pro", 40)), nil
	case "burst-gaming":
		// wayne floods exports at 150/s for 1.5 s, then is silent for
		// 1.5 s, over and over: on average 75/s, inside its contract
		// while on. A use that decays fast would call it light at the
		// start of every burst.
		flood := exportFlood("wayne", "enterprise", 150)
		flood.Ramp, flood.Pulse = nil, 1500*time.Millisecond
		flood.Contract.Rate, flood.Contract.Burst = 2000, 2000
		return base.besideQuiet("Enterprise tenant wayne floods exports at 150/s for 1.5 s, then is silent for 1.5 s, over and over (inside its contract of 2000 tokens/s and 16 concurrent while on), ignoring Retry-After. acme (enterprise, same tier) and globex (pro) are the innocents.", flood), nil
	case "slow-cheap":
		// wayne floods GET /api/v1/orders?rows=40000: a route of cost
		// 1 that the upstream takes 200 ms to serve (5 ms × 40). 150/s
		// is 150 tokens/s, inside the enterprise quota of 200, and 30
		// connection-seconds a second against 8: tokens cannot see it,
		// only what it holds can.
		flood := exportFlood("wayne", "enterprise", 150)
		flood.Contract = &Contract{Rate: 200, Burst: 400, MaxConcurrent: 16}
		flood.Calls = []Call{weighted(Call{Method: "GET", Path: "/api/v1/orders?rows=40000", Criticality: shed.Default}, 1)}
		return base.besideQuiet("Enterprise tenant wayne floods a cheap route (GET /api/v1/orders, cost 1) whose calls the upstream takes 200 ms to serve, at 150/s (150 tokens/s, inside its quota; its contract lifts its cap to 16), ramping from 10% to 40% of the run, ignoring Retry-After: ~30 connection-seconds a second against 8. acme (enterprise, same tier) and globex (pro) are the innocents.", flood), nil
	case "backstop":
		// wayne sends only its own enterprise quota: 19 exports/s of 2000
		// rows (cost 10: 190 of 200 tokens/s), 600 ms each — 11.4
		// connection-seconds a second against 8, so the global backstop (100
		// tokens/s here) is what stands between it and the upstream. The
		// light tenants together use ~39 tokens/s, each well below an equal
		// share of the backstop (25): a fair backstop refuses none of them.
		// wayne's contract keeps the enterprise quota but raises its
		// concurrency cap to 16 (its exports are long), so that the cap (6
		// seats = 100 tokens/s of these exports) does not bind before the
		// backstop does.
		s := base
		s.GlobalTokens = 100
		s.Description = "Enterprise tenant wayne (its contract raises its concurrency cap to 16, not its rate) sends only its own quota, ramping to 19 exports/s of 2000 rows (190 of 200 tokens/s, ~600 ms each) from 10% to 40% of the run, ignoring Retry-After: above the 100 tokens/s global backstop and ~1.4× the upstream. Pro tenants globex and soylent and starter tenant hooli are light (~39 tokens/s together, each below a quarter of the backstop)."
		s.Tenants = []TenantLoad{
			innocentTenant("globex", "pro", 15, 30, 6),
			innocentTenant("soylent", "pro", 10, 20, 4),
			innocentTenant("hooli", "starter", 5, 5, 2),
			{ID: "wayne", Tier: "enterprise", Key: "bench-wayne-key", Contract: &Contract{Rate: 200, Burst: 400, MaxConcurrent: 16}, Role: Noisy,
				Rate: 19, Ramp: &Ramp{Start: 0.1, Peak: 0.4, From: 0.1, To: 1}, Arrivals: Constant,
				Calls: []Call{weighted(Call{Method: "POST", Path: "/api/v1/reports/export?rows=2000", Criticality: shed.Sheddable}, 1)},
				Users: 8, IPs: 2, Timeout: 10 * time.Second},
		}
		return s, nil
	case "many-tenants":
		s := base
		s.Tenants = manyTenants(seed)
		var noisy []string
		for _, tl := range s.Tenants {
			if tl.Role == Noisy {
				noisy = append(noisy, tl.ID)
			}
		}
		s.Description = fmt.Sprintf("%d tenants (20 enterprise at 3 requests/s, 40 pro at 2, 40 starter at 1); %d of them, drawn by the seed (%s), ramp to 25 requests/s of initech's mix (70%% exports) from 10%% to 40%% of the run, ignoring Retry-After: ~27 connection-seconds a second against 8. The rest are innocent.",
			len(s.Tenants), len(noisy), strings.Join(noisy, ", "))
		return s, nil
	case retryStorm:
		return stormScenario(), nil
	case "usage":
		return usageScenario(), nil
	case "overhead":
		// The same cheap request, direct and through each proxy, at half
		// the upstream's capacity: 2 connections × 5 ms exactly (no
		// jitter, so the difference is the proxy's) = 400 requests/s of
		// capacity, 200 offered — few enough that on a shared 2-core
		// machine the proxies' CPU, not the upstream, is what differs.
		return Scenario{Name: name, Baseline: Direct, DefaultModes: []Mode{None, Fairgate}, unlimited: true,
			Description: "One tenant sends GET /api/v1/users/me (exactly 5 ms of one of 2 connections) at half the upstream's capacity, 200 requests/s, Poisson: the baseline goes straight to the upstream, each mode through its proxy. The difference is the proxy's added latency.",
			Upstream:    demoapi.Config{Connections: 2, Jitter: -1},
			Tenants: []TenantLoad{{ID: "acme", Tier: "enterprise", Key: "bench-acme-key", Role: Innocent, Rate: 200,
				Calls: []Call{weighted(usersMe, 1)}, Users: 100, IPs: 10, Timeout: 2 * time.Second}},
			GlobalBurst: 0.5, IPRate: 1000, IPBurst: 1000}, nil
	}
	return Scenario{}, fmt.Errorf("bench: unknown scenario %q (want %s, all or overhead)", name, strings.Join(scenarioNames, ", "))
}

// besideQuiet is s with no global backstop, described by desc, whose
// tenants are noisy beside two quiet ones of different tiers: acme
// (enterprise) and globex (pro), 12 interactive requests a second each.
func (s Scenario) besideQuiet(desc string, noisy ...TenantLoad) Scenario {
	s.GlobalTokens, s.Description = 0, desc
	s.Tenants = append([]TenantLoad{innocentTenant("acme", "enterprise", 12, 20, 4), innocentTenant("globex", "pro", 12, 20, 4)}, noisy...)
	return s
}

// exportFlood is a tenant of tier flooding exports at rate a second inside
// a contract of 1000 tokens/s and 16 concurrent, ramping from a tenth of it
// at 10% of the run to all of it at 40%, ignoring Retry-After.
func exportFlood(id, tier string, rate float64) TenantLoad {
	return TenantLoad{ID: id, Tier: tier, Key: "bench-" + id + "-key", Contract: &Contract{Rate: 1000, Burst: 1000, MaxConcurrent: 16}, Role: Noisy,
		Rate: rate, Ramp: &Ramp{Start: 0.1, Peak: 0.4, From: 0.1, To: 1}, Arrivals: Constant,
		Calls: []Call{weighted(export, 1)}, Users: 16, IPs: 4, Timeout: 10 * time.Second}
}

// manyTenants is many-tenants' cast: 20 enterprise, 40 pro and 40 starter
// tenants at 3, 2 and 1 requests/s (about 180 requests/s, 1.7
// connection-seconds a second), of which manyNoisy, drawn by seed, are
// noisy instead: each ramps to 25 requests/s of initech's mix (7.6 tokens
// and 216 ms of a connection a request: 190 tokens/s, within an enterprise
// quota and 13× a starter's), 27 connection-seconds a second for the five.
func manyTenants(seed uint64) []TenantLoad {
	var out []TenantLoad
	for _, t := range []struct {
		tier string
		n    int
		rate float64
	}{{"enterprise", 20, 3}, {"pro", 40, 2}, {"starter", 40, 1}} {
		for i := range t.n {
			out = append(out, innocentTenant(fmt.Sprintf("%s-%02d", t.tier, i+1), t.tier, t.rate, 5, 1))
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0x6d616e79)) // "many"
	for _, i := range rng.Perm(len(out))[:manyNoisy] {
		tl := &out[i]
		tl.Role, tl.Rate, tl.Ramp, tl.Arrivals = Noisy, 1, &Ramp{Start: 0.1, Peak: 0.4, From: 1, To: 25}, Constant
		tl.Calls = []Call{weighted(export, 70), weighted(search, 30)}
		tl.Users, tl.IPs, tl.Timeout, tl.HonourRetryAfter = 4, 4, 10*time.Second, false
	}
	return out
}

// manyNoisy is the number of noisy tenants in many-tenants.
const manyNoisy = 5

// percentile returns the p-quantile (0 < p ≤ 1) of sorted by nearest rank,
// or NaN for no samples.
func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return ms(sorted[min(max(i, 0), len(sorted)-1)])
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
