// Package gateway is fairgate's HTTP edge: the config file, the public
// listener (HTTP/1.1, and HTTP/2 over TLS with ALPN and over h2c, listen.go;
// the PROXY protocol and trusted proxies, clientaddr.go), a net/http handler
// chain with the edge hygiene (timeouts, size limits, request IDs), the
// admission middleware, and an httputil.ReverseProxy to the upstream (gRPC
// included: grpc.go turns fairgate's own answers to a gRPC call into gRPC
// statuses); plus the admin listener (health, readiness, metrics, and the
// console: an embedded page and its JSON API, console.go) and the ring of
// rejected traces the console draws as span trees (traces.go).
//
// net/http is the reference engine. The opt-in fasthttp engine (fast*.go)
// serves cleartext HTTP/1.x through the same admission.Gate; the
// conformance suite runs every edge behaviour on both, and lists where
// fasthttp still differs. The edge rules both engines apply are each
// written once (rules.go), as are a request's spans and access line
// (requestspans.go: the root span fairgate.request, the proxy.upstream
// span and the access log); an engine only adapts its own request and
// response types to them. Of the fasthttp engine, fastedge.go is the edge
// (fastEdge), fastexchange.go one request on it, fasthead.go its work on
// request and response heads (the peer, the forwarding fields, hop-by-hop
// removal, the method, retries), and fastconns.go the upstream calls a
// client has left.
//
// cmd/fairgate parses flags and calls this package; the bench package runs
// the same server in-process, which is why the wiring lives here and not in
// main.
package gateway
