package bench

import (
	"time"

	"github.com/fairgate/fairgate/internal/demoapi"
	"github.com/fairgate/fairgate/shed"
)

// usageConfig is the usage scenario's gateway config: a completion
// route settled by the trailer the upstream reports its tokens in (each
// tenant reserving what its completions used lately), and a
// pro tier of 8,000 tokens a second (a burst of 20,000, a request's max),
// 6 requests at once, over the upstream's 8 connections.
const usageConfig = `
upstream: %s
server:
  upstream_timeout: 60s
tiers:
  pro: {burst: 20000, rate: 8000, max_concurrent: 6, rank: 1}
routes:
  - method: POST
    path: /v1/chat/completions
    settle: {from: trailer, name: X-Usage-Tokens, reserve: 200, max: 20000, learn: true}
bulkhead:
  total: 8
  pools:
    pro: {share: 100, queue_length: 64, max_wait: 5s}
tenants:
`

// completion is a call of the usage scenario's completion route asking
// for tokens of a log-normal with median and sigma, at most a request's
// max.
func completion(median, sigma float64) Call {
	return Call{Method: "POST", Path: "/v1/chat/completions", Criticality: shed.Default, Weight: 1,
		Tokens: &Tokens{Median: median, Sigma: sigma, Max: 20000}}
}

// usageScenario is usage: an LLM API of 8 connections generating 4,000
// tokens a second each (32,000 together); three pro tenants asking 4
// completions a second of ~180 tokens (median 150), and umbrella, pro
// too, 24 a second of ~1,375 (median 1,000, a long tail): 33,000 tokens
// a second, 4× its quota of 8,000 and more than the upstream generates.
// A fixed cost of the reserve (200) charges umbrella 4,800 tokens a
// second: its quota never binds.
func usageScenario() Scenario {
	s := Scenario{Name: "usage", config: usageConfig, Upstream: demoapi.Config{Connections: 8, TokensPerSecond: 4000},
		DefaultModes: []Mode{None, FixedCost, Fairgate}, GlobalBurst: 0.5, IPRate: 10, IPBurst: 20,
		Targets: Targets{MinGoodputPct: defaultTargets.MinGoodputPct, MaxP99Ratio: defaultTargets.MaxP99Ratio, MaxUsageErrPct: 5}}
	for _, id := range []string{"acme", "globex", "hooli"} {
		s.Tenants = append(s.Tenants, TenantLoad{ID: id, Tier: "pro", Key: "bench-" + id + "-key", Role: Innocent, Rate: 4,
			Calls: []Call{completion(150, 0.6)}, Users: 20, IPs: 4, Timeout: 10 * time.Second, HonourRetryAfter: true})
	}
	s.Tenants = append(s.Tenants, TenantLoad{ID: "umbrella", Tier: "pro", Key: "bench-umbrella-key", Role: Noisy,
		Contract: &Contract{Rate: 8000, Burst: 20000, MaxConcurrent: 6}, Rate: 24, Arrivals: Constant,
		Calls: []Call{completion(1000, 0.8)}, Users: 16, IPs: 4, Timeout: 30 * time.Second})
	s.Description = "An LLM API: 8 connections generating 4,000 tokens a second each, streamed as server-sent events with the count in a trailer (X-Usage-Tokens). " +
		"Three pro tenants (acme, globex, hooli) ask 4 completions a second each of ~180 tokens (log-normal, median 150); pro tenant umbrella, a batch job, 24 a second of ~1,375 (median 1,000, σ 0.8, at most 20,000), ignoring Retry-After: " +
		"33,000 tokens a second, 4× its quota of 8,000 tokens a second (burst 20,000, 6 at once) and more than the upstream generates. " +
		"The route reserves 200 tokens, or what the tenant's completions used lately when that is more (settle.learn), and settles what the trailer says (fairgate); fixed-cost charges the 200 and settles nothing, so umbrella's quota never binds. " +
		"Beside the innocents' targets, umbrella's tokens served must be within 5% of its quota over the run (its rate × the run, plus its burst)."
	return s
}
