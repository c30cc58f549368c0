// Package proxyproto reads the PROXY protocol header (HAProxy's, versions
// 1 and 2) that a load balancer sends at the start of each connection to
// say who the client is, and wraps a net.Listener so that each accepted
// connection's RemoteAddr is that client.
//
// The header is read on the connection's first Read or RemoteAddr call,
// not in Accept: a peer that sends nothing cannot stall the accept loop,
// and the read is bounded by a deadline (Listener.HeaderTimeout). A
// connection whose header is missing or malformed fails that call and
// every later one, so the server closes it without serving a request: a
// listener behind a PROXY-speaking balancer must not take a client's bytes
// for a header, nor serve one that came around it.
//
// Only the addresses are used; v2's TLV extensions are read past.
package proxyproto
