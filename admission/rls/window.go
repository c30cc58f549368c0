package rls

import (
	"fmt"
	"strconv"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// Window is how a rate limit counts requests_per_unit per unit: a token
// bucket, or fixed windows that reset at the unit's boundaries, as
// envoyproxy/ratelimit counts them. The zero value is not set: a
// rate_limit without window follows rls.window, and rls.window unset is
// WindowBucket.
type Window uint8

const (
	// WindowDefault is a window not set (see Window).
	WindowDefault Window = iota
	// WindowBucket is a token bucket of burst requests_per_unit refilled
	// evenly over one unit: never more than one burst at any moment.
	WindowBucket
	// WindowFixed counts requests_per_unit in each window of one unit
	// (times an override's unit_multiplier), the windows aligned to
	// multiples of their length since the Unix epoch (ratelimit.Every):
	// a minute's start at each whole minute of UTC, a day's at 00:00
	// UTC, a week's on a Thursday, as envoyproxy/ratelimit cuts them, so
	// a migrated limit keeps its billing periods. Nothing comes back
	// before the window ends; then all of it does.
	WindowFixed
)

var windowNames = [...]string{WindowDefault: "", WindowBucket: "bucket", WindowFixed: "fixed"}

// String returns the config word for w ("" when not set).
func (w Window) String() string {
	if int(w) < len(windowNames) {
		return windowNames[w]
	}
	return fmt.Sprintf("Window(%d)", uint8(w))
}

// MarshalText returns the config word for w.
func (w Window) MarshalText() ([]byte, error) { return []byte(w.String()), nil }

// UnmarshalText parses "fixed" or "bucket" ("" is WindowDefault) and
// rejects anything else, so a typo fails at load time. The error names no
// field: the decoder, or the rule files' field checker, puts the field's
// path before it.
func (w *Window) UnmarshalText(b []byte) error {
	for i, n := range windowNames {
		if n == string(b) {
			*w = Window(i)
			return nil
		}
	}
	return fmt.Errorf("unknown window %q (want fixed or bucket)", b)
}

// fixed reports whether r counts in fixed windows: its own window when
// set, else rls.window. A request-level override has its descriptor's
// (see overrideRule).
func (s *Service) fixed(r *rule) bool {
	w := r.mode
	if w == WindowDefault {
		w = s.window
	}
	return w == WindowFixed
}

// limitAt is the Limit r decides by: its token bucket, or the fixed
// window of r's length that holds the call's instant. *now is that
// instant, read from the service's clock on first need (a call of token
// buckets alone never reads it), so that every descriptor of a call is
// decided in the same windows.
func (s *Service) limitAt(r *rule, now *time.Time) ratelimit.Limit {
	if !s.fixed(r) {
		return r.limit
	}
	if now.IsZero() {
		*now = s.now()
	}
	return ratelimit.Every(r.window).Limit(r.limit.Burst, *now)
}

// key names the bucket of v's descriptor, whose entries are entries: its
// rule's (rule.bucketKey), and for a fixed window that key marked with
// the window's length, so that windows of two lengths on one set of
// entries (a configured limit per minute, an override per hour) count
// apart, as envoyproxy/ratelimit keys its counters by window, while
// limits of one length share a count. Where the mark starts, a scope of
// entries alone ends or has an entry's length (digits), so no key of
// entries alone is a window's.
func (v *verdict) key(tag string, entries []*ratelimitEntry) ratelimit.BucketKey {
	k := v.rule.bucketKey(tag, entries)
	if v.limit.Fixed() {
		k.Scope += "@" + strconv.FormatInt(int64(v.rule.window), 10)
	}
	return k
}

// untilEnd is the time from now until fixed window l ends (never
// negative): when its tokens come back.
func untilEnd(l ratelimit.Limit, now time.Time) time.Duration {
	return time.Duration(max(l.End-now.UnixNano(), 0))
}

// lacked reports whether r, a take's result from a store call of n takes
// that costs cost, is a bucket without room for it: refused, and either
// the only take, or told to wait, or (a fixed window) holding less than
// cost. A bucket that had room has none of them: it was refused for
// another's sake. The last test covers a window that ended between the
// call's instant and the store's decision: the wait until its end is
// then zero, yet the store counted it full.
func lacked(r ratelimit.Result, l ratelimit.Limit, cost float64, n int) bool {
	return !r.Allowed && (n == 1 || r.RetryAfter > 0 || l.Fixed() && !r.StateUnknown && r.Remaining < cost)
}
