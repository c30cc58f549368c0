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

// Rejection is the JSON body of every answer fairgate itself gives:
// rejections, and the edge's and proxy's failures.
type Rejection struct {
	// Error is the kind of answer: "unauthorized", "rate_limited" (429:
	// you sent too much), "overloaded" (503: we are), "request_too_large",
	// "bad_request", "upstream_timeout", "bad_gateway" or "internal_error".
	Error string `json:"error"`
	// Message explains the answer to a person.
	Message string `json:"message"`
	// Layer names the part of fairgate that answered.
	Layer string `json:"layer"`
	// Reason is the machine word ("tenant_quota", "queue_full", …).
	Reason string `json:"reason"`
	// RetryAfter repeats the Retry-After header, in whole seconds.
	RetryAfter int64 `json:"retry_after"`
	// RequestID is the X-Request-Id of the request.
	RequestID string `json:"request_id"`
}

// WriteRejection writes d's rejection as the client contract says: status,
// Retry-After and the JSON body, from the row of d.Reason.
func WriteRejection(w http.ResponseWriter, d *Decision, reqID string) {
	writeReason(w, d.Reason, d.RetryAfter, reqID, d, d.detail)
}

// WriteReason writes the contract's answer for r outside a decision: the
// edge's and the proxy's failures (413, 400, 502, 504, 500) and a 503 of
// the adaptive layer at Lease.StartUpstream. retry is the Retry-After of a
// 429 or 503 (at least one second is sent); detail, when set, completes the
// messages that take one (ReasonMalformedBody: what was wrong).
func WriteReason(w http.ResponseWriter, r Reason, retry time.Duration, reqID, detail string) {
	writeReason(w, r, retry, reqID, nil, detail)
}

// writeReason is the one place an answer of fairgate's own becomes a
// response.
func writeReason(w http.ResponseWriter, r Reason, retry time.Duration, reqID string, d *Decision, detail string) {
	row := r.row()
	body := Rejection{Error: row.errWord, Layer: row.layer.String(), Reason: row.word, RequestID: reqID,
		Message: r.message(d, detail)}
	switch row.status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		// The rest of the request may still be on the wire.
		w.Header().Set("Connection", "close")
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="fairgate"`)
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		body.RetryAfter = ceilSeconds(retry, 1)
		body.Message += " Retry after " + strconv.FormatInt(body.RetryAfter, 10) + "s."
	}
	WriteError(w, row.status, &body)
}

// WriteError writes body as JSON with status, and Retry-After when
// body.RetryAfter is set. Fairgate's own answers go through WriteReason;
// this is for a front end that must answer in the same shape for reasons
// of its own (the benchmark's baseline limiters).
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
