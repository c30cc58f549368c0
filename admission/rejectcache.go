package admission

import (
	"github.com/fairgate/fairgate/tenant"
)

// quotaKey is what the RateLimit fields show of one quota.
type quotaKey struct {
	name                            string
	limit, window, remaining, reset int64
}

// rejectionKey is everything a rejection's rendering reads (reject).
type rejectionKey struct {
	reason Reason
	retry  int64
	tenant *tenant.Tenant // pointers: a reload's new tenant is another key
	route  *Route
	detail string
	low, n int
	q      [MaxQuotas]quotaKey
}

// keyOf returns d's rejectionKey.
func keyOf(d *Decision) rejectionKey {
	k := rejectionKey{reason: d.Reason, retry: ceilSeconds(d.RetryAfter, 1), tenant: d.Tenant, route: d.Route,
		detail: d.detail, low: d.tightest(), n: d.NQuotas}
	for i := range d.NQuotas {
		q := &d.Quotas[i]
		k.q[i] = quotaKey{name: q.Name, limit: int64(q.Limit), window: ceilSeconds(q.Window, 1),
			remaining: int64(q.Remaining), reset: ceilSeconds(q.Reset, 0)}
	}
	return k
}

// renderedRejection is a rejection as reject rendered it: its status,
// its header fields in order (keys, and values as spans of vals), and its
// JSON body up to the request ID's value.
type renderedRejection struct {
	valid  bool
	key    rejectionKey
	status int
	fields []renderedField
	vals   []byte
	body   []byte
}

type renderedField struct {
	key      string // one of the pipeline's constant names
	from, to int
}

// record is the setter a fresh rendering goes through: it keeps the field.
func (r *renderedRejection) record(key string, v []byte) {
	r.fields = append(r.fields, renderedField{key, len(r.vals), len(r.vals) + len(v)})
	r.vals = append(r.vals, v...)
}

// reject sets the rejection d's header fields (its RateLimit fields, then
// the contract's) with set and returns its status and JSON body, as
// setRateLimitHeaders and answer would, from the buffer's last rendering
// when d renders the same. The body is valid until buf goes back to the
// pool.
//
// A flood is one client sending the same request over and over, and each
// of its rejections is the same answer but for its request ID: the same
// RateLimit fields, Retry-After and message until a second passes or a
// token comes back. Rendering it (the fields' numbers, the message, the
// JSON body) was the largest part of the pipeline's work on a 429
// (bench/PERF.md §12), so buf keeps the last rejection it rendered
// (renderedRejection), keyed by everything the rendering reads
// (rejectionKey), and replays it when the next one is the same. Buffers
// are pooled per P (rejectBuffers), so a flood on one core meets its own
// last answer; there is no shared state and no lock.
func (buf *rejectBuffer) reject(d *Decision, reqID string, set func(key string, v []byte)) (int, []byte) {
	if !jsonPlainString(reqID) { // never so for fairgate's own IDs
		buf.msg = setRateLimitHeaders(d, buf.msg[:0], set)
		return buf.answer(d.Reason, d.RetryAfter, reqID, msgArgs{d.Tenant, d.Route, d.detail}, set)
	}
	r := &buf.last
	if k := keyOf(d); !r.valid || k != r.key {
		r.valid, r.key = false, k
		r.fields, r.vals = r.fields[:0], r.vals[:0]
		buf.msg = setRateLimitHeaders(d, buf.msg[:0], buf.recordFn)
		status, body := buf.answer(d.Reason, d.RetryAfter, "", msgArgs{d.Tenant, d.Route, d.detail}, buf.recordFn)
		// The body ends `"request_id":""}` and a newline: keep it up to
		// the ID's value.
		r.status, r.body = status, append(r.body[:0], body[:len(body)-len("\"}\n")]...)
		r.valid = true
	}
	for _, f := range r.fields {
		set(f.key, r.vals[f.from:f.to])
	}
	buf.body = append(append(append(buf.body[:0], r.body...), reqID...), "\"}\n"...)
	return r.status, buf.body
}

// jsonPlainString reports whether encoding/json writes s as it is.
func jsonPlainString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 0x80 || !jsonPlain[c] {
			return false
		}
	}
	return true
}
