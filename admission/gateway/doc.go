// Package gateway is fairgate's HTTP edge: the config file, a net/http
// handler chain with the edge hygiene (timeouts, size limits, request IDs),
// the admission middleware, and an httputil.ReverseProxy to the upstream;
// plus the admin listener (health, readiness, metrics, and the console: an
// embedded page and its JSON API, console.go) and the ring of rejected
// traces the console draws as span trees (traces.go).
//
// cmd/fairgate parses flags and calls this package; the bench package runs
// the same server in-process, which is why the wiring lives here and not in
// main.
package gateway
