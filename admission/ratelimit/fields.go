package ratelimit

import (
	"math"
	"strconv"
	"time"
)

// QuotaState is what a client is told about one token bucket.
type QuotaState struct {
	// Name is the policy name in the RateLimit headers: "tenant" or the
	// route group's name.
	Name string
	// Limit is the bucket's burst in tokens; Window is the time it takes
	// to refill from empty (Burst/Rate).
	Limit  float64
	Window time.Duration
	// Remaining tokens and the time until the bucket is full.
	Remaining float64
	Reset     time.Duration
	// StateUnknown is true when the store answered without reading the
	// bucket (a failure policy, a cached denial) or from one instance's
	// share of it (ratelimit.Result.StateUnknown): Remaining and Reset are
	// not known, and the RateLimit headers leave them out.
	StateUnknown bool
	// Wait is, when the bucket refused the request, the time until it
	// holds the request's cost; zero when it had room.
	Wait time.Duration
}

// The words a decision is recorded with (metrics, the span attribute
// DecisionAttr), and how often shadow mode logs what it would have
// refused, shared by the pipeline and the rate limit service.
const (
	OutcomeAdmit  = "admit"
	OutcomeReject = "reject"
	// DecisionAttr is the span attribute that carries the outcome.
	DecisionAttr = "admission.decision"
	// DefaultShadowLogEvery is how often, at most, shadow mode logs a
	// quota it would have enforced.
	DefaultShadowLogEvery = 10 * time.Second
)

// CeilSeconds returns d in whole seconds, rounded up, at least min.
func CeilSeconds(d time.Duration, min int64) int64 {
	s := int64(math.Ceil(d.Seconds()))
	if s < min {
		return min
	}
	return s
}

// AppendPolicy appends q as an item of the RateLimit-Policy field:
// "name";q=LIMIT;w=WINDOW, the window in whole seconds (at least 1).
func AppendPolicy(b []byte, q *QuotaState) []byte {
	b = appendSFString(b, q.Name)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, int64(q.Limit), 10)
	b = append(b, ";w="...)
	return strconv.AppendInt(b, CeilSeconds(q.Window, 1), 10)
}

// AppendState appends q as an item of the RateLimit field:
// "name";r=REMAINING;t=RESET, remaining rounded down, reset in whole seconds
// rounded up.
func AppendState(b []byte, q *QuotaState) []byte {
	b = appendSFString(b, q.Name)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, int64(q.Remaining), 10)
	b = append(b, ";t="...)
	return strconv.AppendInt(b, CeilSeconds(q.Reset, 0), 10)
}

// appendSFString appends s as an RFC 8941 sf-string: in double quotes, with
// '"' and '\\' escaped by a backslash and any byte outside printable ASCII
// replaced by '?' (the syntax allows nothing else, and a header must never
// carry CR, LF or NUL).
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c > 0x7e:
			b = append(b, '?')
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
