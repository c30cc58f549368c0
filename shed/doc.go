// Package shed provides the two primitives fairgate uses when the upstream
// itself is the bottleneck: an adaptive concurrency limit learned from
// upstream latency ([Limiter]) and priority-based load shedding ([Shedder]).
//
// The package imports no other fairgate package. The admission pipeline
// composes it: it asks the [Shedder] first (cheap, rejects the least
// important work before it queues), then acquires a [Permit] from the
// [Limiter], feeds both back (Permit.Record or Permit.Drop, Shedder.Observe),
// and resizes the bulkhead pools from the Limiter's OnLimitChange hook.
// Requests of tenants within their fair share of the pool are counted but
// never shed ([Shedder.AdmitExempt]); when the upstream is the bottleneck,
// [FloorFor] gives the priority below which every pool sheds together.
//
// # Adaptive limit
//
// [Limiter] wraps failsafe-go's adaptivelimiter (the gradient of recent over
// baseline latency, bounded by min and max) and adds three guards the
// gradient lacks:
//
//   - The upstream's queue seen per route. Behind an API whose routes take
//     5 ms and 300 ms, a gradient's latency quantile follows the mix of
//     routes, its baseline follows the quantile, and a limit above what the
//     upstream serves at once goes unnoticed while its queue holds reads
//     behind exports. Each call has a class ([Limiter.TryAcquireClass]: the
//     gateway passes the route) and is compared with its class's typical
//     latency; once per 32 calls, if the geometric mean of those ratios is
//     above 1.2, or two of the calls are late (over 3× their class's 90th
//     percentile: a 5 ms read behind a full connection pool, while the
//     other calls keep the mean down), the calls are waiting and the
//     ceiling is cut by 10%; below 1.05 with no late call (and the limit in
//     use) it rises by one per 32 calls. A limit nobody uses does not
//     climb.
//
//   - A configured maximum healthy latency. A call that takes longer than
//     [AdaptiveConfig.MaxLatency] is never learnt (the gradient's baseline
//     would drift upward during a long incident and the limit would climb
//     back); instead it cuts a ceiling on the limit multiplicatively, at most
//     once per MaxLatency, as TCP halves its window once per round trip.
//
//   - Timeouts. A permit held longer than MaxLatency cuts the ceiling however
//     it is released, Drop included, so a steady stream of timeouts cannot let
//     the limit creep up on the few fast calls that still complete.
//
// Healthy calls raise the ceiling again additively (+1 per 32 healthy
// calls, or per limit's worth above 32, while the limit is in use), so it
// recovers within a few round trips once the upstream is fast again. The ceiling starts at
// the initial limit.
//
// failsafe-go's limiter reads the wall clock (time.Now) and offers no way to
// inject another; the Limiter reads the same clock, so that both agree, and
// the package tests drive both with testing/synctest.
//
// # Priority and shedding
//
// A request's [Priority] is a level 0–499 (failsafe-go's scale), derived by
// [PriorityFor] from its route's [Criticality] and its tenant tier's rank.
// Criticality dominates: every critical request outranks every default one,
// which outranks every sheddable one; the tier orders requests within a
// criticality.
//
// [Shedder] keeps a rejection threshold: requests below it are rejected
// immediately, requests at it are rejected in a deterministic fraction,
// requests above it are admitted, so a higher priority is never shed while a
// lower one is admitted. failsafe-go's priority.Prioritizer is not used: it
// only reads the queues of failsafe-go's own limiters (its registration hook
// is internal), whereas fairgate's queues live in the bulkhead pools, and it
// draws random levels within a priority. The Shedder keeps its scale and its
// idea (reject a fraction of recent traffic, taken from the lowest levels)
// and takes the pressure from the caller through [Shedder.Observe].
package shed
