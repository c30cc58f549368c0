package admission

import (
	"net/http"
	"strconv"

	"github.com/fairgate/fairgate/tenant"
)

// Reason is why fairgate refused a request or could not serve it: one row
// of the client contract (reasons), which gives its layer, HTTP status,
// error word and message. The zero Reason, ReasonNone, is "not refused".
type Reason uint8

// The reasons, by layer. Their words (Reason.String) appear in the JSON
// body's "reason", in metrics and in spans, and never change.
const (
	ReasonNone Reason = iota

	// identify
	ReasonMissingKey            // 401: no API key
	ReasonUnknownKey            // 401: a key that identifies no tenant
	ReasonTooManyFailedAttempts // 429: this address failed too often
	ReasonAnonymousQuota        // 429: this address is over the anonymous bucket (auth: none routes)

	// rate
	ReasonTenantQuota      // 429: the tenant's bucket
	ReasonGroupQuota       // 429: the tenant's bucket for the route's group
	ReasonLimitQuota       // 429: one of the tenant's limits (a daily quota, …)
	ReasonGlobalBackstop   // 503: the bucket all tenants share
	ReasonStoreUnavailable // 503: the rate store failed closed
	ReasonInvalidTake      // 500: the rate store refused the take as invalid (a bug)

	// concurrency, shed, bulkhead, adaptive
	ReasonMaxConcurrent // 429: the tenant's cap on requests in flight
	ReasonPriority      // 503: shed, below the pool's priority threshold
	ReasonQueueFull     // 503: the pool's queue is full
	ReasonWaitTimeout   // 503: no seat within the pool's wait timeout
	ReasonDraining      // 503: the gateway is shutting down
	ReasonLimitReached  // 503: the adaptive limit, without pools

	// edge, proxy and the upstream (not decisions of the pipeline)
	ReasonEncodedSlash        // 400: an escaped '/' in the path, refused by encoded_slashes
	ReasonBodyTooLarge        // 413: the body is over max_body_bytes
	ReasonMalformedBody       // 400: the body could not be read
	ReasonUpstreamTimeout     // 504: the upstream did not answer in time
	ReasonUpstreamUnreachable // 502: the upstream could not be reached
	ReasonHandlerPanic        // 500: the embedded handler panicked
)

// reasonRow is one row of the client contract.
type reasonRow struct {
	word   string
	layer  Layer
	status int
	// errWord is the JSON body's "error": what kind of answer this is.
	errWord string
	// message appends the explanation of the answer for a person to b.
	// The rendering adds "Retry after Ns." to every 429 and 503.
	message func(b []byte, m msgArgs) []byte
}

// msgArgs is what a message may name: the decision's tenant and route (nil
// outside the pipeline) and an optional cause. A value, so that rendering a
// message through the table's function fields moves no Decision to the
// heap.
type msgArgs struct {
	tenant *tenant.Tenant
	route  *Route
	detail string
}

const (
	errUnauthorized = "unauthorized"
	errRateLimited  = "rate_limited" // 429: you sent too much
	errOverloaded   = "overloaded"   // 503: we are overloaded
)

// reasons is the client contract: every answer fairgate itself gives a
// request, except a proxied response, renders from here.
var reasons = [...]reasonRow{
	ReasonNone: {word: "none"},

	ReasonMissingKey: {"missing_key", LayerIdentify, http.StatusUnauthorized, errUnauthorized,
		text(`A valid API key is required: send it as "Authorization: Bearer KEY" or "X-API-Key: KEY".`)},
	ReasonUnknownKey: {"unknown_key", LayerIdentify, http.StatusUnauthorized, errUnauthorized,
		text("The API key is not valid.")},
	ReasonTooManyFailedAttempts: {"too_many_failed_attempts", LayerIdentify, http.StatusTooManyRequests, errRateLimited,
		text("Too many requests without a valid API key from this address.")},

	ReasonAnonymousQuota: {"anonymous_quota", LayerRate, http.StatusTooManyRequests, errRateLimited,
		text("Too many requests to routes without credentials from this address.")},
	ReasonTenantQuota: {"tenant_quota", LayerRate, http.StatusTooManyRequests, errRateLimited,
		func(b []byte, m msgArgs) []byte {
			b = append(append(append(append(append(append(b, "Tenant "...), m.tenant.ID...), " is over its "...), m.tenant.Tier...),
				" rate quota ("...), m.route.Name...)
			b = strconv.AppendFloat(append(b, " costs "...), m.route.Cost, 'f', -1, 64)
			return append(b, " tokens)."...)
		}},
	ReasonGroupQuota: {"group_quota", LayerRate, http.StatusTooManyRequests, errRateLimited,
		func(b []byte, m msgArgs) []byte {
			return append(append(append(append(append(b, "Tenant "...), m.tenant.ID...), " is over its quota for "...),
				m.route.Group...), " requests."...)
		}},
	ReasonLimitQuota: {"limit_quota", LayerRate, http.StatusTooManyRequests, errRateLimited,
		func(b []byte, m msgArgs) []byte {
			return append(append(append(append(append(b, "Tenant "...), m.tenant.ID...), " is over its "...),
				m.detail...), " limit."...)
		}},
	ReasonGlobalBackstop: {"global_backstop", LayerRate, http.StatusServiceUnavailable, errOverloaded,
		func(b []byte, m msgArgs) []byte {
			return append(append(append(b, "The service is overloaded (rate: global_backstop) and tenant "...), m.tenant.ID...),
				" is above its fair share of it; this is not your quota, and tenants within their shares are still served."...)
		}},
	ReasonStoreUnavailable: {"store_unavailable", LayerRate, http.StatusServiceUnavailable, errOverloaded, nil},
	ReasonInvalidTake: {"invalid_take", LayerRate, http.StatusInternalServerError, "internal_error",
		text("The request's rate limit could not be applied; the operator has been told.")},

	ReasonMaxConcurrent: {"max_concurrent", LayerConcurrency, http.StatusTooManyRequests, errRateLimited,
		func(b []byte, m msgArgs) []byte {
			return append(append(append(b, "Tenant "...), m.tenant.ID...), " has too many requests in flight."...)
		}},
	ReasonPriority:     {"priority", LayerShed, http.StatusServiceUnavailable, errOverloaded, nil},
	ReasonQueueFull:    {"queue_full", LayerBulkhead, http.StatusServiceUnavailable, errOverloaded, nil},
	ReasonWaitTimeout:  {"wait_timeout", LayerBulkhead, http.StatusServiceUnavailable, errOverloaded, nil},
	ReasonDraining:     {"draining", LayerBulkhead, http.StatusServiceUnavailable, errOverloaded, nil},
	ReasonLimitReached: {"limit_reached", LayerAdaptive, http.StatusServiceUnavailable, errOverloaded, nil},

	ReasonEncodedSlash: {"encoded_slash", LayerEdge, http.StatusBadRequest, "bad_request",
		text(`The path holds an escaped slash ("%2F"), which this gateway refuses: send the segment without it.`)},
	ReasonBodyTooLarge: {"body_too_large", LayerEdge, http.StatusRequestEntityTooLarge, "request_too_large",
		text("The request body is larger than this gateway accepts.")},
	ReasonMalformedBody: {"malformed_body", LayerEdge, http.StatusBadRequest, "bad_request",
		func(b []byte, m msgArgs) []byte {
			return append(append(append(b, "The request body could not be read: "...), m.detail...), '.')
		}},
	ReasonUpstreamTimeout: {"timeout", LayerProxy, http.StatusGatewayTimeout, "upstream_timeout",
		text("The upstream did not answer in time.")},
	ReasonUpstreamUnreachable: {"upstream_unreachable", LayerProxy, http.StatusBadGateway, "bad_gateway",
		text("The upstream could not be reached.")},
	ReasonHandlerPanic: {"handler_panic", LayerUpstream, http.StatusInternalServerError, "internal_error",
		text("The request failed inside the service.")},
}

func text(s string) func([]byte, msgArgs) []byte {
	return func(b []byte, _ msgArgs) []byte { return append(b, s...) }
}

func (r Reason) row() *reasonRow {
	if int(r) < len(reasons) {
		return &reasons[r]
	}
	return &reasons[ReasonNone]
}

// String returns the reason's word ("tenant_quota", "queue_full", …).
func (r Reason) String() string { return r.row().word }

// Layer returns the layer that gives the reason.
func (r Reason) Layer() Layer { return r.row().layer }

// Status returns the HTTP status of the answer.
func (r Reason) Status() int { return r.row().status }

// appendMessage appends the person-readable text of r for m. An overload
// (503) without a message of its own says which layer is overloaded and
// that it is not the client's quota.
func (r Reason) appendMessage(b []byte, m msgArgs) []byte {
	row := r.row()
	if row.message != nil {
		return row.message(b, m)
	}
	if row.errWord == errOverloaded {
		return append(append(append(append(append(b, "The service is overloaded ("...), row.layer.String()...), ": "...),
			row.word...), "); this is not your quota."...)
	}
	return b
}
