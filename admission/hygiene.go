package admission

import (
	"math/rand/v2"
	"net/http"
	"net/netip"
	"strconv"

	"github.com/fairgate/fairgate/shed"
	"github.com/fairgate/fairgate/tenant"
)

// Header names the gate sets. Clients' own copies of them (and anything
// else that looks like a tenant or rate-limit header) are deleted before the
// pipeline runs, so neither fairgate nor the upstream ever trusts them.
const (
	HeaderRequestID  = "X-Request-Id"
	HeaderTenantID   = "X-Tenant-Id"
	HeaderTenantTier = "X-Tenant-Tier"
	HeaderPriority   = "X-Fairgate-Priority"
)

// trustedPriority returns the X-Fairgate-Priority of a request from a
// network in trusted_priority_from, when it is a whole number in 0–499.
func (g *Gate) trustedPriority(r *http.Request) (shed.Priority, bool) {
	return g.trustedPriorityOf(r.Header.Get(HeaderPriority), r.RemoteAddr)
}

// trustedPriorityOf is trustedPriority for the header's value v of a
// request from remoteAddr ("ip:port").
func (g *Gate) trustedPriorityOf(v, remoteAddr string) (shed.Priority, bool) {
	trusted := g.cfg.Load().trusted
	if len(trusted) == 0 || v == "" {
		return 0, false
	}
	addr, err := netip.ParseAddr(clientIP(remoteAddr))
	if err != nil {
		return 0, false
	}
	addr = addr.Unmap()
	for _, p := range trusted {
		if p.Contains(addr) {
			n, err := strconv.Atoi(v)
			if err != nil || n < int(shed.MinPriority) || n > int(shed.MaxPriority) {
				return 0, false
			}
			return shed.Priority(n), true
		}
	}
	return 0, false
}

// stripClientHeaders deletes every header a client might use to pass itself
// off as a tenant, fake a quota, raise its own priority, or change the
// method the upstream runs after the route was priced (the method override
// headers that many frameworks honour: a GET priced at 1 must not become a
// POST export upstream).
func stripClientHeaders(h http.Header) {
	for k := range h {
		if IsClientHeader(k) {
			delete(h, k)
		}
	}
}

// IsClientHeader reports whether a request header named name is one the
// pipeline deletes before it runs (stripClientHeaders): a tenant, quota,
// priority or method-override header.
func IsClientHeader(name string) bool {
	// Compare with '_' read as '-': CGI-style upstreams (WSGI, Rack,
	// PHP) map X_Tenant_Id and X-Tenant-Id to the same variable.
	return hasPrefixFoldUnderscore(name, "X-Tenant-") || hasPrefixFoldUnderscore(name, "Ratelimit") ||
		hasPrefixFoldUnderscore(name, "X-Ratelimit") || isFoldUnderscore(name, HeaderPriority) ||
		isFoldUnderscore(name, "X-Http-Method-Override") || isFoldUnderscore(name, "X-Http-Method") ||
		isFoldUnderscore(name, "X-Method-Override")
}

// isFoldUnderscore is a case-insensitive s == name in which '_' in s matches
// '-' in name.
func isFoldUnderscore(s, name string) bool {
	return len(s) == len(name) && hasPrefixFoldUnderscore(s, name)
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// hasPrefixFoldUnderscore is a case-insensitive HasPrefix in which '_' in s
// matches '-' in prefix.
func hasPrefixFoldUnderscore(s, prefix string) bool {
	if len(s) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		c, p := lower(s[i]), lower(prefix[i])
		if c == '_' {
			c = '-'
		}
		if c != p {
			return false
		}
	}
	return true
}

// NewRequestID returns a new request ID: 16 random hex digits.
func NewRequestID() string {
	var b [16]byte
	return string(AppendRequestID(b[:0]))
}

// AppendRequestID appends a new request ID to b.
func AppendRequestID(b []byte) []byte {
	const hexd = "0123456789abcdef"
	a, c := rand.Uint64(), rand.Uint64()
	for i := range 8 {
		b = append(b, hexd[(a>>(4*i))&0xf])
	}
	for i := range 8 {
		b = append(b, hexd[(c>>(4*i))&0xf])
	}
	return b
}

// hideCredential removes the credential that identified the request, so
// the raw API key never reaches the upstream.
func hideCredential(h http.Header, src tenant.KeySource) {
	if k := credentialHeader(src); k != "" {
		h.Del(k)
	}
}

// credentialHeader is the header a key from src was presented in, "" for
// none.
func credentialHeader(src tenant.KeySource) string {
	switch src {
	case tenant.BearerKey:
		return "Authorization"
	case tenant.HeaderKey:
		return "X-Api-Key"
	}
	return ""
}
