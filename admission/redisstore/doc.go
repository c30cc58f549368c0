// Package redisstore is the rate layer's shared store: token buckets in
// Redis (single node, Sentinel or Cluster), so that many fairgate instances
// enforce one quota between them instead of one each.
//
// Each take is one Lua script (take.lua) run with EVALSHA (EVAL after
// NOSCRIPT); so is a TakeAll, all or nothing over several buckets of one
// tenant (a route group's and the tenant's, or several limits on a key). The script reads Redis's clock (TIME), so instances with skewed
// clocks agree, and applies the same arithmetic as admission's embedded
// store. Keys are "fg:{<tag>}:<scope>" with a gateway-owned hash tag derived
// from the tenant, so a tenant's buckets share one cluster slot whatever
// bytes its ID holds, and every key expires when its bucket is full again.
//
// A fixed window (ratelimit.Limit.End set) is decided by window.lua in the
// same single call as the request's buckets, always exactly on Redis,
// whatever the mode; its state is kept under its bucket key and ":w", so
// the scripts that read buckets never see it, and expires at the window's
// end.
//
// Redis trouble never becomes a latency outage: each round trip has a
// deadline (Config.Timeout, 5ms by default, counted from the instant it is
// sent; a reply later than that still decides but counts as slow, and none
// is awaited past three Timeouts), a circuit breaker stops asking a failing
// Redis and probes for its recovery, and meanwhile Config.FailurePolicy
// decides: Local (the default; an embedded bucket holding this instance's
// share of the quota), FailOpen, or FailClosed (an error matching
// ErrUnavailable, which the admission pipeline maps to 503). Store.Decide
// reports which, Options.OnPolicy counts it, and the log says so at most
// once per Config.LogEvery.
//
// Our own queue is not Redis's health. Concurrent takes on one instance
// share pipelines (auto-batching without a timer window), with as many
// pipelines in flight as the queue needs while Redis answers quickly; a
// take that still waits in that queue longer than Config.QueueTimeout is an
// overload of the rate layer (ErrOverloaded): the policy decides it, but
// the breaker never counts it.
//
// On Redis Cluster each master has its own breaker and batches (a lane),
// so one slow master fails over its own tenants only.
//
// A tenant known to be over quota until T is denied locally until T (the
// denial cache).
//
// A missing key is a full bucket, so a key must not expire before its
// bucket is full under the limit it will next be read with. A reload that
// lowers a rate (or raises a burst) calls Store.Relimit with the changed
// buckets, which moves their keys' expiry to their full instant under the
// new limit (Store.RelimitBackstop does the same for the global
// backstop); no script ever moves an expiry earlier, so a take still in
// flight under the old limit cannot undo it.
package redisstore
