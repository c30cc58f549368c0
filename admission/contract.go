package admission

import (
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// ceilSeconds returns d in whole seconds, rounded up, at least min.
func ceilSeconds(d time.Duration, min int64) int64 { return ratelimit.CeilSeconds(d, min) }

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
	writeReason(w, d.Reason, d.RetryAfter, reqID, msgArgs{d.Tenant, d.Route, d.detail}, nil)
}

// WriteReason writes the contract's answer for r outside a decision: the
// edge's and the proxy's failures (413, 400, 502, 504, 500) and a 503 of
// the adaptive layer at Lease.StartUpstream. retry is the Retry-After of a
// 429 or 503 (at least one second is sent); detail, when set, completes the
// messages that take one (ReasonMalformedBody: what was wrong).
func WriteReason(w http.ResponseWriter, r Reason, retry time.Duration, reqID, detail string) {
	writeReason(w, r, retry, reqID, msgArgs{detail: detail}, nil)
}

// rejectBuffers are the buffers a rejection's message and JSON body are
// appended to before the body is written (the ResponseWriter copies it).
var rejectBuffers = sync.Pool{New: func() any {
	b := &rejectBuffer{msg: make([]byte, 0, 256), body: make([]byte, 0, 512)}
	b.recordFn = b.last.record
	return b
}}

type rejectBuffer struct {
	msg, body []byte
	num       [20]byte // Retry-After's digits
	// last is the last rejection reject rendered; recordFn is
	// last.record, made once.
	last     renderedRejection
	recordFn func(key string, v []byte)
}

// writeReason is the one place an answer of fairgate's own becomes a
// net/http response. The header values are kept in t (nil: allocated one
// by one), the body is appended into a pooled buffer: a rejection
// allocates nothing of its own but t.
func writeReason(w http.ResponseWriter, r Reason, retry time.Duration, reqID string, m msgArgs, t *answerText) {
	h := w.Header()
	buf := rejectBuffers.Get().(*rejectBuffer)
	status, body := buf.answer(r, retry, reqID, m, func(key string, v []byte) { t.set(h, key, v) })
	w.WriteHeader(status)
	w.Write(body)
	rejectBuffers.Put(buf)
}

// answer renders the contract's answer for r into buf: it sets the
// answer's header fields with set and returns the status and the JSON
// body (in buf.body, valid until buf goes back to the pool). Every stack
// fairgate answers on renders through it.
func (buf *rejectBuffer) answer(r Reason, retry time.Duration, reqID string, m msgArgs, set func(key string, v []byte)) (int, []byte) {
	row := r.row()
	body := Rejection{Error: row.errWord, Layer: row.layer.String(), Reason: row.word, RequestID: reqID}
	msg := r.appendMessage(buf.msg[:0], m)
	switch row.status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		// The rest of the request may still be on the wire.
		set("Connection", connClose)
	case http.StatusUnauthorized:
		set("Www-Authenticate", bearerRealm)
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		body.RetryAfter = ceilSeconds(retry, 1)
		msg = append(strconv.AppendInt(append(msg, " Retry after "...), body.RetryAfter, 10), "s."...)
	}
	// The message is read in place: body does not outlive this call, and
	// msg is not written again before buf goes back to the pool.
	body.Message = unsafe.String(unsafe.SliceData(msg), len(msg))
	buf.body = appendRejection(buf.body[:0], &body)
	buf.msg = msg
	setJSONHeaders(&body, buf.num[:0], set)
	return row.status, buf.body
}

// The fixed header values of answers, as bytes for answer's setter.
var (
	connClose       = []byte("close")
	bearerRealm     = []byte(`Bearer realm="fairgate"`)
	applicationJSON = []byte("application/json")
	noStore         = []byte("no-store")
)

// WriteError writes body as JSON with status, and Retry-After when
// body.RetryAfter is set. Fairgate's own answers go through WriteReason;
// this is for a front end that must answer in the same shape for reasons
// of its own (the benchmark's baseline limiters).
func WriteError(w http.ResponseWriter, status int, body *Rejection) {
	buf := rejectBuffers.Get().(*rejectBuffer)
	buf.body = appendRejection(buf.body[:0], body)
	writeJSON(w, status, body, buf.body, nil)
	rejectBuffers.Put(buf)
}

// writeJSON writes the headers of body and then js, its JSON.
func writeJSON(w http.ResponseWriter, status int, body *Rejection, js []byte, t *answerText) {
	h := w.Header()
	var num [20]byte
	setJSONHeaders(body, num[:0], func(key string, v []byte) { t.set(h, key, v) })
	w.WriteHeader(status)
	w.Write(js)
}

// setJSONHeaders sets the header fields of an answer whose body is body:
// Retry-After when it has one (its digits appended to num, which set may
// keep no longer than the call), Content-Type, Cache-Control.
func setJSONHeaders(body *Rejection, num []byte, set func(key string, v []byte)) {
	if body.RetryAfter > 0 {
		set("Retry-After", strconv.AppendInt(num, body.RetryAfter, 10))
	}
	set("Content-Type", applicationJSON)
	set("Cache-Control", noStore)
}

// appendRejection appends r as encoding/json marshals it, and a newline.
func appendRejection(b []byte, r *Rejection) []byte {
	b = appendJSONString(append(b, `{"error":`...), r.Error)
	b = appendJSONString(append(b, `,"message":`...), r.Message)
	b = appendJSONString(append(b, `,"layer":`...), r.Layer)
	b = appendJSONString(append(b, `,"reason":`...), r.Reason)
	b = strconv.AppendInt(append(b, `,"retry_after":`...), r.RetryAfter, 10)
	b = appendJSONString(append(b, `,"request_id":`...), r.RequestID)
	return append(b, "}\n"...)
}

// jsonPlain says which ASCII bytes encoding/json writes as they are: one
// load per byte of a rejection's message instead of six comparisons.
var jsonPlain = func() (t [utf8.RuneSelf]bool) {
	for c := range t {
		t[c] = c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// appendJSONString appends s as a JSON string exactly as encoding/json
// writes it: HTML-safe (<, > and & escaped), U+2028 and U+2029 escaped,
// and invalid UTF-8 replaced by U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hexd = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if jsonPlain[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexd[c>>4], hexd[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(append(b, s[start:i]...), `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', hexd[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(append(b, s[start:]...), '"')
}
