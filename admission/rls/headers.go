package rls

import (
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// headers renders the client-facing headers (rls.response_headers):
// RateLimit-Policy lists every limit that applied; RateLimit and
// RateLimit-Limit/-Remaining/-Reset describe the one that decided (a
// rejection, else the fewest tokens left), in its real state even under
// shadow mode, as its descriptor status tells it (see known), and are
// left out when that status tells no state; Retry-After, in whole seconds
// (at least 1), when the answer is OVER_LIMIT.
func headers(vs []verdict, decider *verdict, over bool, retry time.Duration) []*corev3.HeaderValue {
	// All values are written into one buffer, made one string and sliced,
	// and the header values are one array: four allocations, not twenty.
	var arr [256]byte
	b := arr[:0]
	var keys [len(headerKeys)]string
	var ends [len(headerKeys)]int
	n := 0
	mark := func(key string) {
		keys[n], ends[n] = key, len(b)
		n++
	}
	for i := range vs {
		v := &vs[i]
		if !limited(v) {
			continue
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		q := quota(v)
		b = ratelimit.AppendPolicy(b, &q)
	}
	mark(headerKeys[0])
	if known(decider) {
		q := quota(decider)
		b = ratelimit.AppendState(b, &q)
		mark(headerKeys[1])
		b = strconv.AppendUint(b, uint64(decider.rule.requestsPerUnit), 10)
		mark(headerKeys[2])
		b = strconv.AppendInt(b, int64(q.Remaining), 10)
		mark(headerKeys[3])
		b = strconv.AppendInt(b, ceilSeconds(q.Reset, 0), 10)
		mark(headerKeys[4])
	}
	if over {
		b = strconv.AppendInt(b, ceilSeconds(retry, 1), 10)
		mark(headerKeys[5])
	}
	all := string(b)
	hv := make([]corev3.HeaderValue, n)
	out := make([]*corev3.HeaderValue, n)
	start := 0
	for i := range n {
		hv[i].Key, hv[i].Value = keys[i], all[start:ends[i]]
		out[i] = &hv[i]
		start = ends[i]
	}
	return out
}

// headerKeys are the response headers, in the order headers writes them;
// Retry-After, last, only when over the limit.
var headerKeys = [...]string{"RateLimit-Policy", "RateLimit", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "Retry-After"}

func quota(v *verdict) ratelimit.QuotaState {
	return ratelimit.QuotaState{Name: v.rule.name, Limit: float64(v.rule.requestsPerUnit), Window: v.rule.window,
		Remaining: remaining(v), Reset: untilReset(v)}
}

// ceilSeconds is d in whole seconds, rounded up, at least least.
func ceilSeconds(d time.Duration, least int64) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++ // d + 1s - 1 would overflow at the longest wait
	}
	return max(s, least)
}
