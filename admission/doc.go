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
//	rate         rate.go         token buckets: group, tenant, global     429, 503
//	concurrency  concurrency.go  the tenant's cap on requests in flight   429
//	shed         shed.go         the pool's priority threshold            503
//	bulkhead     bulkhead.go     a seat in the pool, fair queuing         503
//	adaptive     adaptive.go     a permit of the learned upstream limit   503
//
// The route (route.go) gives a request its cost and criticality before any
// layer runs. The rate layer's buckets are kept by a ratelimit.Store: the
// embedded ratelimit.MemoryStore or the Redis store (admission/redisstore).
//
// # What a request holds
//
// The concurrency, shed, bulkhead and adaptive layers hold something while
// the request is served: a slot, a seat, a permit. lease.go keeps them and
// gives each back exactly once; a layer that says no gives back what the
// earlier ones took, and a panic in a later layer does too.
//
// # HTTP
//
// Gate.Middleware (middleware.go) is the pipeline as net/http middleware,
// and Gate.Echo the same for Echo. hygiene.go strips the headers a client
// must not set; contract.go writes rejections as the client contract says;
// ratelimitheaders.go encodes the RateLimit header fields. Reload
// (reload.go) swaps the configuration while requests are decided.
//
// # The admin views
//
// admin.go builds the JSON the admin listener serves and the console draws
// (TenantState, PoolsState), on request, from state the layers keep anyway.
// window.go keeps what they do not: each tenant's rejections by layer and
// each pool's queue waits over the last minute, in one-second slots of
// atomic counters (no lock on the request path). recent.go keeps the latest
// rejections, only while someone watches the console.
//
// Tracing and metrics (telemetry.go) follow the observability contract in
// DESIGN.md.
package admission
