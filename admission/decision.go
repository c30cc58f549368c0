package admission

import (
	"github.com/fairgate/fairgate/admission/ratelimit"
	"time"

	"github.com/fairgate/fairgate/shed"
	"github.com/fairgate/fairgate/tenant"
)

// Layer names the part of the pipeline that decided.
type Layer uint8

// The layers, in the order a request meets them.
const (
	LayerNone Layer = iota
	LayerIdentify
	LayerRate
	LayerConcurrency
	LayerShed
	LayerBulkhead
	LayerAdaptive
	// Not layers of the pipeline: where fairgate's other answers come from
	// (the edge's body limit, the proxy, an embedded handler's panic).
	LayerEdge
	LayerProxy
	LayerUpstream
)

var layerNames = [...]string{"none", "identify", "rate", "concurrency", "shed", "bulkhead", "adaptive", "edge", "proxy", "upstream"}

// String returns the layer's name as it appears in the JSON body, spans and
// metrics ("rate", "bulkhead", …).
func (l Layer) String() string {
	if int(l) < len(layerNames) {
		return layerNames[l]
	}
	return "unknown"
}

// Decision is the pipeline's answer for one request. It is a value: the
// zero Decision is "not decided".
type Decision struct {
	// Allowed is true when every layer admitted the request.
	Allowed bool
	// Status is the HTTP status of a rejection: 401, 429 or 503. Zero when
	// allowed.
	Status int
	// Layer is the layer that rejected the request (LayerNone when
	// allowed).
	Layer Layer
	// Reason is why the request was rejected (ReasonNone when allowed);
	// Status and Layer are its row of the client contract.
	Reason Reason
	// RetryAfter is how long the client should wait before retrying; set on
	// every rejection, at least one second when written to the client.
	RetryAfter time.Duration
	// Tenant is the identified tenant, nil before identification.
	Tenant *tenant.Tenant
	// Route is the matched route (never nil once classified).
	Route *Route
	// Priority is the request's shedding priority (0–499): from the tier's
	// rank and the route's criticality, or a trusted caller's header.
	Priority shed.Priority
	// Quotas are the token buckets the rate layer consulted, for the
	// RateLimit headers. Quotas[0] is the tenant's own bucket, then the
	// route group's, then the tenant's limits in their configured order.
	Quotas [MaxQuotas]QuotaState
	// NQuotas is how many of Quotas are set.
	NQuotas int
	// ShadowRejected is, for a request the rate layer admitted only
	// because shadow mode covers it (tenant, tier or route), the reason
	// it would have been refused for (tenant_quota, group_quota or
	// limit_quota); ReasonNone otherwise.
	ShadowRejected Reason
	// Exempt is true when the request passed the shared layers as exempt
	// (its route's or its tenant's exempt: true): no global backstop, no
	// shedding, no pool, no adaptive permit.
	Exempt bool

	lease Lease
	// detail completes the message of a rejection that takes one (what
	// was wrong with a malformed body).
	detail string
	// bodyRead: the pipeline read the request's body (Request.ReadBody,
	// bufferBody), so a rejection after it need not close the connection.
	bodyRead bool
	// credential is where the request presented the key that identified
	// it, for Config.HideCredentials.
	credential tenant.KeySource

	// arrived: the shedding layer counted the request in its tenant's use
	// of its pool (bulkhead.Pools.Arrive).
	arrived bool

	// backstop is the global backstop's answer, when it was asked.
	backstop    ratelimit.BackstopResult
	hasBackstop bool
}

// MaxQuotas is the most buckets the rate layer charges one request to: the
// tenant's own, its route group's and its limits.
const MaxQuotas = 2 + tenant.MaxLimits

// QuotaState is what a client is told about one token bucket
// (ratelimit.QuotaState, which the rate limit service shares).
type QuotaState = ratelimit.QuotaState
