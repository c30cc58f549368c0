package admission

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"
)

// ceilSeconds returns d in whole seconds, rounded up, at least min.
func ceilSeconds(d time.Duration, min int64) int64 {
	s := int64(math.Ceil(d.Seconds()))
	if s < min {
		return min
	}
	return s
}

// StatusClientClosedRequest is nginx's 499: the client closed the connection
// before the response. It is logged, never seen by the client.
const StatusClientClosedRequest = 499

// Rejection is the JSON body of every rejection.
type Rejection struct {
	// Error is "unauthorized", "rate_limited" or "overloaded".
	Error string `json:"error"`
	// Message explains the rejection to a person.
	Message string `json:"message"`
	// Layer names the pipeline layer that said no.
	Layer string `json:"layer"`
	// Reason is the layer's machine word ("tenant_quota", "queue_full", …).
	Reason string `json:"reason"`
	// RetryAfter repeats the Retry-After header, in whole seconds.
	RetryAfter int64 `json:"retry_after"`
	// RequestID is the X-Request-Id of the request.
	RequestID string `json:"request_id"`
}

// WriteRejection writes d's rejection: status, Retry-After and the JSON
// body. It is the one place a rejection becomes a response.
func WriteRejection(w http.ResponseWriter, d *Decision, reqID string) {
	body := Rejection{Layer: d.Layer.String(), Reason: d.Reason, RequestID: reqID}
	h := w.Header()
	switch d.Status {
	case http.StatusUnauthorized:
		body.Error = "unauthorized"
		body.Message = "A valid API key is required: send it as \"Authorization: Bearer KEY\" or \"X-API-Key: KEY\"."
		if d.Reason == "unknown_key" {
			body.Message = "The API key is not valid."
		}
		h.Set("WWW-Authenticate", `Bearer realm="fairgate"`)
	case http.StatusTooManyRequests:
		body.Error = "rate_limited"
		body.RetryAfter = ceilSeconds(d.RetryAfter, 1)
		body.Message = tooManyMessage(d, body.RetryAfter)
	default:
		body.Error = "overloaded"
		body.RetryAfter = ceilSeconds(d.RetryAfter, 1)
		body.Message = "The service is overloaded (" + d.Layer.String() + ": " + d.Reason + "); this is not your quota. Retry after " + strconv.FormatInt(body.RetryAfter, 10) + "s."
	}
	WriteError(w, d.Status, &body)
}

// WriteError writes a JSON error body with status, and Retry-After when
// body.RetryAfter is set. Edge errors (413, 502, 504) use it too, so every
// error a client sees from fairgate has the same shape.
func WriteError(w http.ResponseWriter, status int, body *Rejection) {
	h := w.Header()
	if body.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(body.RetryAfter, 10))
	}
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	b, _ := json.Marshal(body) // a struct of strings and ints cannot fail
	w.Write(append(b, '\n'))
}

func tooManyMessage(d *Decision, retry int64) string {
	after := " Retry after " + strconv.FormatInt(retry, 10) + "s."
	switch d.Reason {
	case "tenant_quota":
		return "Tenant " + d.Tenant.ID + " is over its " + d.Tenant.Tier + " rate quota (" + d.Route.Name + " costs " + strconv.FormatFloat(d.Route.Cost, 'f', -1, 64) + " tokens)." + after
	case "group_quota":
		return "Tenant " + d.Tenant.ID + " is over its quota for " + d.Route.Group + " requests." + after
	case "too_many_failed_attempts":
		return "Too many requests without a valid API key from this address." + after
	case "max_concurrent":
		return "Tenant " + d.Tenant.ID + " has too many requests in flight." + after
	}
	return "Too many requests." + after
}
