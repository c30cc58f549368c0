package redisstore

import (
	_ "embed"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// A fixed window (ratelimit.Limit.End set) is decided by window.lua, in
// the one script call of its request, beside the request's buckets: a
// request of buckets alone runs take.lua, whose arguments stay those of a
// bucket. Its state lives under a key of its own (windowKey), so that no
// script that reads buckets (sync.lua, relimit.lua) ever meets a window's
// state. A window is always decided on Redis, whatever the mode: sync
// mode's shares and debt are a bucket's arithmetic.

//go:embed window.lua
var windowLua string

// windowScript runs window.lua.
var windowScript = redis.NewScript(bucketLua + windowLua)

// windowSuffix ends a window's key. A bucket key's scope is plain (no
// ':') or '#' and hex, so no bucket key ends so, and the hash tag, hence
// the slot, is the bucket's.
const windowSuffix = ":w"

// windowKey returns the Redis key of k's fixed window: its bucket key and
// windowSuffix.
func windowKey(k ratelimit.BucketKey) string {
	var buf [maxKey + len(windowSuffix)]byte
	return string(append(appendKey(buf[:0], k), windowSuffix...))
}

// hasWindow reports whether one of takes is a fixed window's.
func hasWindow(takes []ratelimit.Take) bool {
	return slices.ContainsFunc(takes, func(t ratelimit.Take) bool { return t.Limit.Fixed() })
}

// windowCall returns window.lua's keys and arguments for takes: per
// take, a bucket's key, or a window's and its bucket's; and the window's
// end (µs; 0 for a bucket), rate, burst and cost.
func windowCall(takes []ratelimit.Take) ([]string, []any) {
	keys := make([]string, 0, 2*len(takes))
	args := make([]any, 0, 4*len(takes))
	for _, t := range takes {
		var end int64
		if t.Limit.Fixed() {
			end = endMicros(t.Limit.End)
			keys = append(keys, windowKey(t.Key))
		}
		keys = append(keys, bucketKey(t.Key))
		args = append(args, end, t.Limit.Rate, t.Limit.Burst, t.Cost)
	}
	return keys, args
}

// endMicros converts a window's end (Unix ns, > 0) to µs, Redis's clock's
// unit, rounding up: the window never ends before End.
func endMicros(end int64) int64 {
	us := end / 1000
	if end%1000 != 0 {
		us++
	}
	return us
}

// decodeWindow derives a window take's Result from window.lua's reply for
// it, struct.pack '<dd' (tokens left, the window's end in µs), for a take
// of cost allowed or not at now (µs), as the embedded store's takeFixed
// does: the tokens come back all at once at the end, so RetryAfter (when
// the window lacks the cost) and ResetAfter are both the time until then.
func decodeWindow(v any, cost float64, allowed bool, now int64) (ratelimit.Result, error) {
	var f [2]float64
	if err := decodeDoubles(v, f[:]); err != nil {
		return ratelimit.Result{}, err
	}
	left, end := f[0], int64(f[1])
	r := ratelimit.Result{Allowed: allowed, Remaining: max(0, left), ResetAfter: time.Duration(max(end-now, 0)) * time.Microsecond}
	if !allowed && left < cost {
		r.RetryAfter = r.ResetAfter
	}
	return r, nil
}
