// Package client is the client side of fairgate's contract: an
// http.RoundTripper that turns 429 and 503 rejections into well-timed
// retries or typed errors, and paces itself so that it rarely sees a 429 at
// all. It imports no other fairgate package and works against any server
// that sends Retry-After and the IETF RateLimit headers.
//
//	c, err := client.NewClient(client.Config{})
//	resp, err := c.Get("https://api.example.com/v1/search")
//	var rej *client.RejectedError
//	if errors.As(err, &rej) {
//		log.Printf("%d %s/%s request_id=%s: %s", rej.Status, rej.Layer, rej.Reason, rej.RequestID, rej.Message)
//	}
//
// # What it does with a rejection
//
// A 429 means the tenant sent too much: the transport waits exactly the
// Retry-After (never less) and sends again. A 503 means the service is
// overloaded: it waits the Retry-After plus full jitter, a uniform draw
// from a window that starts at the Retry-After (or Config.BackoffBase) and
// doubles with each retry up to Config.MaxBackoff, so that a fleet told
// "come back in 1 s" does not come back in the same millisecond. A
// Retry-After above Config.MaxWait is not waited for: the rejection is
// returned at once rather than retried early.
//
// Only what is safe to send twice is retried: the idempotent methods (GET,
// HEAD, OPTIONS, PUT, DELETE, TRACE) and requests with an Idempotency-Key
// header, and only when the body can be sent again (no body, or GetBody,
// which http.NewRequest sets for bytes, strings and buffers). Other
// statuses and transport errors are returned as they are, never retried.
//
// # Why a retry budget
//
// Retries multiply load exactly when the server can least take it: three
// attempts per request triple an overload. So every retry is drawn from a
// budget shared by all requests of the Transport — at most Ratio (10 %) of
// the requests of the last Window (10 s), plus MinPerSecond (1) so that a
// quiet client can still retry — as Finagle's RetryBudget and gRPC's retry
// throttling do. A fleet of such clients adds at most about 10 % to an
// overload however long it lasts; a request the budget refuses fails at
// once with ErrBudgetExhausted instead of waiting.
//
// # Pacing
//
// fairgate sends RateLimit-Policy ("tenant";q=25;w=5: 25 units, refilled
// from empty in 5 s, and an item more for the route's group, such as
// "exports", and for each of the tenant's limits) and RateLimit
// ("tenant";r=20;t=1: 20 left, full again in 1 s, for the bucket that
// binds the request) on every response. For each host and credential the
// transport keeps the last state of every quota named and spaces the
// requests it paces so that the remaining units last until the reset:
// with E units left, t seconds to the reset and c units per request,
// consecutive sends are at least c×t/E apart. Against a token bucket this
// is self-correcting: spending faster than the refill lowers E and raises
// t, which widens the spacing, and the client settles with its bucket
// half full, sending at exactly the quota — so a client offered three
// times its quota sends at its quota and sees no 429s, while a burst after
// a quiet spell still goes out almost at once.
//
// A quota paces only the routes whose responses named it. A route is the
// method and the URL path (Config.Route may name it by the server's
// template instead); the transport remembers 256 per host and credential
// and forgets the least recently used. So an export that empties the
// exports group's bucket holds back the next export, not the tenant's
// GETs. A quota every response so far has named, such as the tenant's,
// paces a route not seen yet too: the first request of a route is paced
// by those alone. A success that names no quota says its route has none,
// and a group_quota 429 that its quota is a group's: neither quota then
// paces the routes not seen yet. A quota's state is shared by its routes: any response
// that reports it updates it. The cost c of a request is learned per
// route from how far r falls (fairgate's routes cost several tokens, an
// export many times a GET), starting at 1. Without the structured fields
// the RateLimit-Limit/-Remaining/-Reset trio is used, as one quota of
// every route with no refill assumed before the reset.
//
// After a 429, every request with the same credential waits for its
// Retry-After, not only the one rejected — unless the body's reason says
// that a route group's bucket or one of the tenant's limits refused it
// (group_quota, limit_quota). Then only the routes of the refusing quota
// wait: the quota the 429's RateLimit field reports, or, when it reports
// none, the rejected route alone. A limit that every route is charged to
// still holds them all. Such a 429 (or tenant_quota), when its
// Retry-After is long enough to tell, also teaches the route's cost, as
// what the bucket holds once the Retry-After has passed, so that a route
// whose cost was not known yet is not refused again.
// Pacing is per Transport: several processes sharing one credential each
// pace on the same headers, so together they overshoot, meet 429s and
// wait those out. Config.DisablePacing turns all of this off.
//
// # Deadlines and errors
//
// Every wait — Retry-After, backoff or pacing — is checked against the
// request's context deadline before it starts: one that would pass it
// returns at once, with the server's reason and request_id in a
// *RejectedError whose Cause is ErrDeadline (or, before any response, an
// error wrapping ErrDeadline). A context that ends during a wait ends it.
//
// A 429 or 503 the transport gives up on is returned as a *RejectedError
// (through http.Client, inside a *url.Error: errors.As finds it), with
// Cause saying why it stopped: ErrNotRetryable, ErrAttemptsExhausted,
// ErrBudgetExhausted, ErrWaitTooLong, ErrDeadline or the context's error.
// This departs from the letter of http.RoundTripper, which returns every
// response as a response; Config.RejectionAsResponse restores it for code
// that wants to read the 429 itself.
//
// # Time
//
// The transport reads the time and waits only through Config.Clock, and
// draws jitter only from Config.Rand, so tests run on a fake clock with a
// seeded source and no real sleeping.
package client
