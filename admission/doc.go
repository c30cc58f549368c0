// Package admission is fairgate's admission pipeline: the layers a request
// passes before it may reach the upstream, the decision they reach, what an
// admitted request holds while it is served, and the client contract a
// rejection is written in.
//
// # The pipeline
//
// Gate.Check runs the layers in order, cheapest first, and stops at the
// first that says no (gate.go reads as that list):
//
//	identify     identify.go     the tenant, from the API key alone       401, 429
//	rate         rate.go         token buckets: tenant, group, limits,    429, 503
//	                             global (shadow: decide, count, admit)
//	concurrency  concurrency.go  the tenant's cap on requests in flight   429
//	shed         shed.go         the pool's priority threshold            503
//	bulkhead     bulkhead.go     a seat in the pool, fair queuing         503
//	adaptive     adaptive.go     a permit of the learned upstream limit   503
//
// The adaptive layer guards the upstream call itself, so it runs when the
// call starts (Lease.StartUpstream), not in Check. A proxy reads the request
// body (body.go) between the shed and bulkhead layers, so a client that
// leaves while queued is noticed. The route (route.go) gives a request its
// cost and criticality before any layer runs; a route with auth: none skips
// the tenant layers for a per-IP bucket (identify.go). The rate layer's
// buckets are kept by a ratelimit.Store: the embedded
// ratelimit.MemoryStore or the Redis store (admission/redisstore).
//
// # What a request holds
//
// The concurrency, shed, bulkhead and adaptive layers hold something while
// the request is served: a slot, a seat, a permit. A Lease (lease.go) keeps
// them and gives each back exactly once (StartUpstream, Answered, Release);
// a layer that says no gives back what the earlier ones took, and a panic
// in a later layer does too.
//
// # HTTP
//
// Gate.Middleware (middleware.go) is the pipeline as net/http middleware
// for a handler that is the upstream, Gate.ProxyMiddleware for a reverse
// proxy (admission/echoadapter serves the first on Echo), and Gate.Admit
// the same pipeline for an HTTP stack other than net/http, all ending in
// one step (edge.go's decided). hygiene.go strips the headers a
// client must not set; reasons.go is the client contract, one typed row per
// reason (layer, status, error word, message), and contract.go renders
// every answer fairgate gives from it; ratelimitheaders.go sets the
// RateLimit header fields (their encoding is admission/ratelimit's, which
// the rate limit service shares). Reload (reload.go) swaps the configuration while
// requests are decided; TenantState (admin.go) is the admin view of one
// tenant.
//
// # The admin views
//
// admin.go builds the documented JSON of the admin listener
// (/admin/tenants, /admin/tenants/{id}, /admin/pools), which the console
// draws (TenantState, PoolsState): snake_case fields, durations in
// milliseconds, floats rounded. It is built on request from state the
// layers keep anyway, so nobody pays for it while nobody asks. window.go
// keeps what the layers do not: each tenant's rejections by layer and
// each pool's queue waits over the last minute, in one-second slots of
// atomic counters (no lock on the request path). recent.go keeps the latest
// rejections, only while someone watches the console.
//
// Tracing and metrics (telemetry.go) follow the observability contract in
// DESIGN.md.
package admission
