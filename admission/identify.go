package admission

import (
	"context"
	"net/netip"
	"strings"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/shed"
	"github.com/fairgate/fairgate/tenant"
)

// identify runs the identify layer: the tenant comes from the API key
// alone. A request without a known key is rejected (401), or 429 once its
// address has failed too often, and is classified as unmatched.
func (g *Gate) identify(ctx context.Context, c *compiled, req Request, d *Decision) {
	sp := g.layerSpan(ctx, SpanIdentify)
	defer sp.end(d, LayerIdentify)
	key, src, ok := tenant.FindKey(tenant.Credentials{Authorization: req.Header.Get("Authorization"), APIKey: req.Header["X-Api-Key"]})
	var t *tenant.Tenant
	if ok {
		t, ok = c.reg.Lookup(key)
	}
	if !ok {
		g.rejectUnauthenticated(c, req, src != tenant.NoKey, d)
		if sp.on() {
			sp.s.SetAttributes(attrAuth.String(d.Reason.String()))
		}
		return
	}
	d.Tenant = t
	d.credential = src
	d.Priority = shed.PriorityFor(t.Rank, d.Route.Criticality)
	if req.HasPriority {
		d.Priority = req.Priority
	}
	if sp.on() {
		sp.s.SetAttributes(attrAuth.String("ok"), AttrTenantID.String(t.ID), AttrTenantTier.String(t.Tier))
	}
}

func (g *Gate) rejectUnauthenticated(c *compiled, req Request, presented bool, d *Decision) {
	d.Route = c.routes.unmatched
	ip := unauthKey(req.RemoteAddr)
	res := g.unauth.TakeAt(g.unauth.Clock(), ratelimit.BucketKey{Tenant: ip, Scope: scopeUnauthenticated}, c.unauth, 1)
	switch {
	case !res.Allowed:
		d.reject(ReasonTooManyFailedAttempts, res.RetryAfter)
	case presented:
		d.reject(ReasonUnknownKey, 0)
	default:
		d.reject(ReasonMissingKey, 0)
	}
}

// The scopes of the per-IP buckets.
const (
	scopeUnauthenticated = "unauthenticated"
	scopeAnonymous       = "anonymous"
)

// rateAnonymous runs the rate layer of a route with auth: none: the
// client's per-IP bucket (kept per instance, like the failed-attempts
// bucket), charged the route's cost. Over it: 429.
func (g *Gate) rateAnonymous(c *compiled, req Request, d *Decision) {
	d.Priority = shed.PriorityFor(0, d.Route.Criticality)
	res := g.unauth.TakeAt(g.unauth.Clock(), ratelimit.BucketKey{Tenant: unauthKey(req.RemoteAddr), Scope: scopeAnonymous}, c.anon, d.Route.Cost)
	d.Quotas[0] = quotaState("anonymous", c.anon, res)
	d.NQuotas = 1
	if !res.Allowed {
		d.reject(ReasonAnonymousQuota, res.RetryAfter)
	}
}

// unauthKey is the key of a failed-authentication bucket: the client's
// IPv4 address, or its IPv6 /64 (one host usually has a whole /64 to rotate
// through).
func unauthKey(remote string) string {
	ip := clientIP(remote)
	a, err := netip.ParseAddr(ip)
	if err != nil || a.Unmap().Is4() {
		return ip
	}
	p, _ := a.Prefix(64)
	return p.String()
}

// clientIP returns the host part of a "host:port" peer address.
func clientIP(addr string) string {
	if i := strings.LastIndexByte(addr, ':'); i >= 0 && !strings.HasSuffix(addr, "]") {
		addr = addr[:i]
	}
	return strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]")
}
