package admission

import (
	"net/http"
	"unsafe"
)

// answerText holds the header values the gate sets for one request (its
// request ID, the RateLimit fields, a rejection's Retry-After, …) in one
// allocation, in place of a string and a one-element slice per value.
//
// Each value is copied once into buf and never written again, so the
// strings that point into buf are immutable, as strings.Builder's are; the
// header map keeps the whole answerText alive while it holds any of them.
// Values that do not fit (an unusually long policy name) are allocated as
// usual. The zero answerText is ready to use; it is not safe for
// concurrent use.
type answerText struct {
	vals [10]string
	nv   int
	buf  [224]byte // the RateLimit fields, the request ID, Retry-After, Content-Type, Cache-Control
	nb   int
}

// set sets h[key] to v, a value made of bytes the caller may reuse, and
// returns it as a string. key must be in canonical form. On a nil t it
// allocates, as Header.Set does.
func (t *answerText) set(h http.Header, key string, v []byte) string {
	var s string
	switch {
	case t == nil || len(v) == 0:
		s = string(v)
	case t.nb+len(v) <= len(t.buf):
		n := copy(t.buf[t.nb:], v)
		s = unsafe.String(&t.buf[t.nb], n)
		t.nb += n
	default:
		s = string(v)
	}
	t.setString(h, key, s)
	return s
}

// setString sets h[key] to s, which is already a string. key must be in
// canonical form.
func (t *answerText) setString(h http.Header, key, s string) {
	if t == nil || t.nv == len(t.vals) {
		h[key] = []string{s}
		return
	}
	t.vals[t.nv] = s
	h[key] = t.vals[t.nv : t.nv+1 : t.nv+1]
	t.nv++
}
