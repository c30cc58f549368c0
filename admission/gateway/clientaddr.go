package gateway

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
)

// trustedProxies are the networks of server.trusted_proxies. The zero
// value trusts nothing: the peer is the client.
type trustedProxies []netip.Prefix

func (tp trustedProxies) trusts(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range tp {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientOf returns the address ("ip:port") of the client of a request
// from peer whose X-Forwarded-For fields are xff, and whether peer is a
// trusted proxy (whose forwarding fields then stand). The client is the
// rightmost hop of X-Forwarded-For that is not a trusted proxy — the
// leftmost, when all are — or peer when peer is not trusted or there is
// no valid hop: a hop a client wrote to the left of the first untrusted
// one is never believed. A hop that is not an IP address ends the walk
// there, at the hop to its right.
func (tp trustedProxies) clientOf(peer string, xff []string) (client string, viaProxy bool) {
	if len(tp) == 0 {
		return peer, false
	}
	ap, err := netip.ParseAddrPort(peer)
	if err != nil || !tp.trusts(ap.Addr()) {
		return peer, false
	}
	client = peer
	for i := len(xff) - 1; i >= 0; i-- {
		hops := xff[i]
		for hops != "" {
			var hop string
			if j := strings.LastIndexByte(hops, ','); j >= 0 {
				hop, hops = hops[j+1:], hops[:j]
			} else {
				hop, hops = hops, ""
			}
			a, err := netip.ParseAddr(strings.TrimSpace(hop))
			if err != nil {
				return client, true
			}
			client = netip.AddrPortFrom(a.Unmap(), 0).String()
			if !tp.trusts(a) {
				return client, true
			}
		}
	}
	return client, true
}

// viaProxyKey marks the context of a request whose peer is a trusted
// proxy; the value is the peer's address.
type viaProxyKey struct{}

// fromTrustedProxy sets r's RemoteAddr to its client's (clientOf) and,
// when its peer is a trusted proxy, remembers the peer in r's context for
// the forwarding fields (forwardedFor). Without trusted proxies r is
// returned as it is.
func (tp trustedProxies) fromTrustedProxy(r *http.Request) *http.Request {
	if len(tp) == 0 {
		return r
	}
	client, via := tp.clientOf(r.RemoteAddr, r.Header["X-Forwarded-For"])
	if !via {
		return r
	}
	r = r.WithContext(context.WithValue(r.Context(), viaProxyKey{}, r.RemoteAddr))
	r.RemoteAddr = client
	return r
}

// forwardedFor sets out's X-Forwarded-For and X-Forwarded-Proto as
// forwardingFields says when in came through a trusted proxy, and reports
// whether it did; if not, the fields stay fairgate's own (SetXForwarded).
func (tp trustedProxies) forwardedFor(out, in *http.Request) bool {
	peer, ok := in.Context().Value(viaProxyKey{}).(string)
	if !ok {
		return false
	}
	ip := peer
	if ap, err := netip.ParseAddrPort(peer); err == nil {
		ip = ap.Addr().Unmap().String()
	}
	fwdFor, fwdProto, _ := tp.forwardingFields(peer, ip, in.Header["X-Forwarded-For"], in.Header.Get("X-Forwarded-Proto"),
		out.Header.Get("X-Forwarded-Proto"))
	out.Header.Set("X-Forwarded-For", fwdFor)
	out.Header.Set("X-Forwarded-Proto", fwdProto)
	return true
}
