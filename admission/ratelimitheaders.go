package admission

import (
	"strconv"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// setRateLimitHeaders sets the IETF draft's RateLimit-Policy field (every
// bucket the request was charged to, by name) and RateLimit field, and the
// widely deployed RateLimit-Limit, -Remaining and -Reset, both for the
// tightest bucket: the one that refused with the longest wait, else the
// one with the fewest tokens left — what binds this request, and what a
// client pacing itself should follow.
// They say only what is known: a bucket the store answered for without
// reading it (a failure policy, a cached denial) has a policy item but no
// state item, and the trio describes a bucket whose state is known, or is
// left out. Each is set with set, its value valid only during the call,
// rendered in b (set's argument escapes, so the caller lends a buffer); it
// returns b.
func setRateLimitHeaders(d *Decision, b []byte, set func(key string, v []byte)) []byte {
	for i := range d.NQuotas {
		q := &d.Quotas[i]
		if q.Name == "" {
			continue
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = ratelimit.AppendPolicy(b, q)
	}
	if len(b) == 0 {
		return b
	}
	set("Ratelimit-Policy", b)
	low := d.tightest()
	if low < 0 {
		return b
	}
	q := &d.Quotas[low]
	set("Ratelimit", ratelimit.AppendState(b[:0], q))
	set("Ratelimit-Limit", strconv.AppendInt(b[:0], int64(q.Limit), 10))
	set("Ratelimit-Remaining", strconv.AppendInt(b[:0], int64(q.Remaining), 10))
	b = strconv.AppendInt(b[:0], ceilSeconds(q.Reset, 0), 10)
	set("Ratelimit-Reset", b)
	return b
}
