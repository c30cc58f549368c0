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
// domain per file (or several files per domain with
// rls.merge_domain_config: true, as MERGE_DOMAIN_CONFIG=true), descriptors
// matched by key and optional value, with wildcards, nested descriptors,
// rate_limit {unit, requests_per_unit, unlimited, name, replaces},
// shadow_mode, quota_mode, share_threshold, metadata, detailed_metric and
// value_to_metric, and the YAML its reader takes (anchors, aliases, merge
// keys, 0x10 and 1_000, yes and no). Errors name the file and the field
// ("configs/a.yaml: descriptors[2].rate_limit.unit: unknown unit "minut"").
//
// detailed_metric and value_to_metric only name envoyproxy/ratelimit's
// stats by the request's values; here metric labels name the configured
// descriptor whatever a request sends, so both are accepted and change
// nothing. metadata (any mapping) is read and kept with the descriptor's
// rate limit as a protobuf Struct; it is not sent (envoyproxy/ratelimit's
// RESPONSE_DYNAMIC_METADATA has no equivalent yet).
//
// What envoyproxy/ratelimit accepts but ignores is refused, with the fix
// in the message: a field given twice in one mapping (it keeps the last),
// a field outside the mapping it belongs in (unit beside key, shadow_mode
// inside rate_limit), a field written before a merge key ("<<") that
// brings it too (its YAML reader takes the merged value, YAML the field's),
// and a second YAML document (it reads the first). It
// refuses, and so does this: unlimited beside a unit, a replaces naming
// its own rate limit, share_threshold on a value without "*".
//
// # Token buckets, or fixed windows
//
// envoyproxy/ratelimit counts requests in fixed windows (a counter per
// unit, reset when the unit turns over), so a client can spend a whole
// window's quota at its end and another at the start of the next: twice
// the limit within a moment. Here requests_per_unit per unit is by
// default a token bucket of burst requests_per_unit refilled evenly over
// one unit (Limit{Rate: rpu/unit, Burst: rpu}): the same long-run rate, at
// most one burst at any instant, and a client that waits gets tokens back
// gradually rather than all at once. A rate_limit's window: fixed, or
// rls.window: fixed for every rate_limit without a window of its own,
// counts in envoyproxy/ratelimit's windows instead (WindowFixed), for
// quotas that are bills: the call's window is cut from the service's
// clock (Service.limitAt) and the store counts to its end.
//
// # Matching
//
// A request descriptor is a list of entries (key, value). Each entry
// descends one level of the domain's descriptor tree, among the children
// of the node the previous entry reached, in envoyproxy/ratelimit's order:
//
//  1. the child with the entry's key and exactly its value (a wildcard
//     counts when the value sent is its very text, "botnet*");
//  2. else the first child, in the order the config lists them, whose
//     value holds a "*" and matches the entry's value: each "*" stands for
//     any run of characters, none included ("/api/*/action" matches
//     "/api/7/action", "*" matches an empty value). The first, not the
//     longest: with user=bot* (2/min) listed before user=botnet* (4/min),
//     botnet-w4 is limited to 2/min. Across merged files the order is the
//     order the files are read (paths in order, a folder's files by name;
//     envoyproxy/ratelimit's order across files is unspecified);
//  3. else the child with the entry's key and no value.
//
// Nothing else is tried: an entry that reached a node does not come back
// to a wildcard or key-only sibling when the next entry finds nothing
// below it. The rate limit is the one of the node the last entry reached;
// a descriptor that leaves the tree, or ends on a node without
// rate_limit, is not limited.
//
// A "*" in a key makes the descriptor's key and value, joined by "_", one
// pattern for the entry's key and value joined alike, in step 2, as
// envoyproxy/ratelimit matches it: "x-*" reaches every key that begins
// with "x-", whatever its value. Otherwise key and value are compared
// apart. envoyproxy/ratelimit joins them for every lookup, so there entry
// (a_b, c) also reaches descriptor (a, b_c), and (k_q, z) reaches (k, *z);
// here neither does.
//
// Each value a key-only node or a wildcard matches has its own bucket,
// named by the values the request sent, as in envoyproxy/ratelimit. With
// share_threshold: true a wildcard's values share one bucket instead: an
// entry that reached it is named by the wildcard ("files/*" for
// files/a.pdf and files/b.csv), also when the limit is on a node below it.
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
//
// A descriptor with quota_mode: true is a quota (rule.quotaMode): over
// it, its own status is OVER_LIMIT, but the request is refused only when
// every quota descriptor of the request is over, or when a descriptor
// that is no quota is, as envoyproxy/ratelimit decides.
package rls
