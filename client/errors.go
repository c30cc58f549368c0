package client

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Why the transport stopped retrying a rejected request: a RejectedError's
// Cause, so errors.Is(err, client.ErrBudgetExhausted) tells them apart.
var (
	// ErrNotRetryable: the method is not idempotent and the request has no
	// Idempotency-Key header, or its body cannot be sent again (no
	// GetBody).
	ErrNotRetryable = errors.New("client: request is not retryable")
	// ErrAttemptsExhausted: Config.MaxAttempts attempts were made.
	ErrAttemptsExhausted = errors.New("client: attempts exhausted")
	// ErrBudgetExhausted: the retry budget had no retry left.
	ErrBudgetExhausted = errors.New("client: retry budget exhausted")
	// ErrWaitTooLong: the server asked for a wait beyond Config.MaxWait.
	ErrWaitTooLong = errors.New("client: wait beyond MaxWait")
	// ErrDeadline: the wait would pass the request's context deadline.
	// Pacing returns it (wrapped) before a first attempt too.
	ErrDeadline = errors.New("client: wait would pass the deadline")
)

// RejectedError is a 429 or 503 the transport gave up on, with the
// server's explanation decoded from fairgate's JSON body
// ({error, message, layer, reason, retry_after, request_id}). Fields the
// body lacks or that do not decode are empty; Status and RetryAfter come
// from the response itself.
type RejectedError struct {
	// Status is the HTTP status: 429 (the tenant sent too much) or 503
	// (the service is overloaded).
	Status int
	// Code is the body's "error" word: "rate_limited" or "overloaded".
	Code string
	// Message is the body's explanation for a person; for a body that is
	// not JSON, its first line (at most 200 bytes).
	Message string
	// Layer is the fairgate layer that said no ("rate", "bulkhead", …).
	Layer string
	// Reason is the layer's machine word ("tenant_quota", "queue_full", …).
	Reason string
	// RetryAfter is the Retry-After header (seconds or HTTP date), else
	// the body's retry_after; zero when neither is given.
	RetryAfter time.Duration
	// RequestID is the body's request_id, else the X-Request-Id header:
	// what fairgate's operators need to find the request.
	RequestID string
	// Attempts is the number of attempts made, the first included.
	Attempts int
	// Cause is why the transport stopped: ErrNotRetryable,
	// ErrAttemptsExhausted, ErrBudgetExhausted, ErrWaitTooLong,
	// ErrDeadline, or the context's error when it ended during a wait.
	Cause error
}

func (e *RejectedError) Error() string {
	var b strings.Builder
	b.WriteString("client: ")
	b.WriteString(strconv.Itoa(e.Status))
	b.WriteByte(' ')
	b.WriteString(http.StatusText(e.Status))
	if e.Layer != "" || e.Reason != "" {
		b.WriteString(" (" + e.Layer + ": " + e.Reason + ")")
	}
	if e.RequestID != "" {
		b.WriteString(" request_id " + e.RequestID)
	}
	if e.Message != "" {
		b.WriteString(": " + e.Message)
	}
	b.WriteString(" [after " + strconv.Itoa(e.Attempts) + " attempt")
	if e.Attempts != 1 {
		b.WriteByte('s')
	}
	if e.Cause != nil {
		b.WriteString("; " + e.Cause.Error())
	}
	b.WriteByte(']')
	return b.String()
}

// Unwrap returns Cause.
func (e *RejectedError) Unwrap() error { return e.Cause }

// rejectionBody is fairgate's JSON error body. RetryAfter is a float so
// that a server sending fractions still decodes.
type rejectionBody struct {
	Error      string  `json:"error"`
	Message    string  `json:"message"`
	Layer      string  `json:"layer"`
	Reason     string  `json:"reason"`
	RetryAfter float64 `json:"retry_after"`
	RequestID  string  `json:"request_id"`
}

// maxRetryAfter bounds a Retry-After so that a hostile value cannot
// overflow a Duration; anything near it is beyond any MaxWait anyway.
const maxRetryAfter = 1e6 * time.Second

// decodeRejection builds the RejectedError of a response with status and
// header, from the first bytes of its body. ra is the response's
// Retry-After (see retryAfter); a zero ra falls back to the body's.
func decodeRejection(status int, h http.Header, body []byte, ra time.Duration) *RejectedError {
	e := &RejectedError{Status: status, RetryAfter: ra}
	var rb rejectionBody
	// A body of the wrong shape still yields the fields that decoded: a
	// type mismatch does not stop encoding/json.
	if err := json.Unmarshal(body, &rb); err != nil && !isTypeError(err) {
		e.Message = firstLine(body)
	} else {
		e.Code, e.Message, e.Layer, e.Reason, e.RequestID = rb.Error, rb.Message, rb.Layer, rb.Reason, rb.RequestID
		if e.RetryAfter == 0 && rb.RetryAfter > 0 {
			e.RetryAfter = min(time.Duration(rb.RetryAfter*float64(time.Second)), maxRetryAfter)
		}
	}
	if e.RequestID == "" {
		e.RequestID = h.Get("X-Request-Id")
	}
	return e
}

func isTypeError(err error) bool {
	var te *json.UnmarshalTypeError
	return errors.As(err, &te)
}

// firstLine returns body's first line, trimmed, as valid UTF-8 without
// control characters, cut at 200 bytes.
func firstLine(body []byte) string {
	s := string(body)
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:200]
	}
	s = strings.ToValidUTF8(s, "")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
	return strings.TrimSpace(s)
}

// retryAfter reads h's Retry-After, in delay-seconds or an HTTP date
// (relative to now). It returns 0 when there is none or it does not
// parse, and never more than maxRetryAfter.
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := h.Get("Retry-After")
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return min(time.Duration(min(secs, int64(maxRetryAfter/time.Second)))*time.Second, maxRetryAfter)
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(t.Sub(now), 0), maxRetryAfter)
	}
	return 0
}
