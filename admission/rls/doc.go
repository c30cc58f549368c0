// Package rls is fairgate's Envoy rate limit service: the gRPC API
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit that Envoy's
// envoy.filters.http.ratelimit filter (and Istio, Contour, Gloo, Emissary
// through it) calls, deciding through a ratelimit.Store (the embedded
// MemoryStore or the shared Redis store, with its denial cache and failure
// policy).
//
// # Configuration
//
// The rules are read from envoyproxy/ratelimit's own config files, as they
// are, so a migration is pointing fairgate at the existing folder: one
// domain per file, descriptors matched by key and optional value, nested
// descriptors, rate_limit {unit, requests_per_unit, unlimited, name},
// replaces, shadow_mode and detailed_metric. Errors name the file and the
// field ("configs/a.yaml: descriptors[2].rate_limit.unit: unknown unit
// "minut"").
//
// # Token buckets, not fixed windows
//
// envoyproxy/ratelimit counts requests in fixed windows (a counter per
// unit, reset when the unit turns over), so a client can spend a whole
// window's quota at its end and another at the start of the next: twice
// the limit within a moment. Here requests_per_unit per unit is a token
// bucket of burst requests_per_unit refilled evenly over one unit
// (Limit{Rate: rpu/unit, Burst: rpu}): the same long-run rate, at most one
// burst at any instant, and a client that waits gets tokens back
// gradually rather than all at once.
//
// # Matching
//
// A request descriptor is a list of entries (key, value). Each entry
// descends one level of the domain's descriptor tree: the child with the
// same key and value wins, then a child whose value ends in "*" and is a
// prefix of the entry's value (longest first), then the child with the key
// and no value. The rate limit is the one of the node the last entry
// reached; a descriptor that leaves the tree, or ends on a node without
// rate_limit, is not limited. A key-only node limits each value apart (its
// bucket is named by the values the request sent), as in
// envoyproxy/ratelimit.
//
// Bucket keys are scoped by the domain (the Redis store's hash tag: a
// domain's buckets share one slot of a cluster) and the request's
// descriptor path; a long path is hashed, so neither memory per bucket nor
// a Redis key grows with what a client sends. Metric labels use the
// configured path (bounded by the config), never the request's values.
//
// # Several descriptors
//
// The descriptors of one request are charged all or nothing, in one
// ratelimit.MultiStore TakeAll (one lock embedded, one Lua call on Redis):
// a request refused by one descriptor costs the others nothing, unlike
// envoyproxy/ratelimit, which charges each on its own. Descriptors in
// shadow mode are taken with the others, as if enforced; when only they
// refuse, the request is OK and the enforced descriptors are charged.
package rls
