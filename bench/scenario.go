package bench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/fairgate/fairgate/admission/gateway"
	"github.com/fairgate/fairgate/internal/demoapi"
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

// Lookup returns the named built-in scenario, from its traffic file
// (bench/scenarios/NAME.yaml). seed picks what a scenario draws at random
// (many-tenants' noisy tenants); 0 means 1, as in Options.
func Lookup(name string, seed uint64) (Scenario, error) {
	if seed == 0 {
		seed = 1
	}
	if !slices.Contains(scenarioNames, name) && name != "overhead" {
		return Scenario{}, fmt.Errorf("bench: unknown scenario %q (want %s, all or overhead)", name, strings.Join(scenarioNames, ", "))
	}
	tr, err := builtinTraffic(name)
	if err != nil {
		return Scenario{}, fmt.Errorf("bench: scenario %s: %w", name, err)
	}
	return tr.Scenario(seed)
}

// Scenario names, in the order --scenario all runs them.
var scenarioNames = []string{"noisy-neighbour", "slow-export", "overload", "nat", "same-tier", "two-tier-flood", "burst-gaming", "slow-cheap", "backstop", "many-tenants", retryStorm, "usage"}

// ScenarioNames returns the names Lookup knows.
func ScenarioNames() []string { return slices.Clone(scenarioNames) }

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
