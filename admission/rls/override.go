package rls

import (
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
)

// overrideUnits maps the request-level limit override's units to ours.
var overrideUnits = map[typev3.RateLimitUnit]Unit{
	typev3.RateLimitUnit_SECOND: UnitSecond, typev3.RateLimitUnit_MINUTE: UnitMinute,
	typev3.RateLimitUnit_HOUR: UnitHour, typev3.RateLimitUnit_DAY: UnitDay,
	typev3.RateLimitUnit_MONTH: UnitMonth, typev3.RateLimitUnit_YEAR: UnitYear,
}

// maxOverrideWindow is the longest window an override's unit and
// unit_multiplier may make: the stores' bound on a bucket's refill time.
const maxOverrideWindow = 1e9 * time.Second

// overrideRule is the rule of a request-level limit override (validated).
// It keeps the matched node's name, so metrics and headers still name the
// configured descriptor; it has no configured name, so current_limit.name
// is empty and no replaces names it, as in envoyproxy/ratelimit. Its
// bucket is the descriptor's own (bucketKey is made of the entries alone):
// an override and the configured limit share the tokens of one set of
// entries. It counts as the configured limit does (its window, else
// rls.window), so the two keep one kind of state for those entries; in
// fixed windows they share a count while their windows are as long
// (verdict.key).
func overrideRule(o *ratelimitOverride, n *node) *rule {
	u := overrideUnits[o.Unit]
	window := u.Duration()
	if m := o.GetUnitMultiplier(); m != nil {
		window *= time.Duration(m.Value)
	}
	name, mode := "override", WindowDefault
	if n != nil {
		name = n.path
		if n.limit != nil {
			name, mode = n.limit.name, n.limit.mode
		}
	}
	r := newRule(name, o.RequestsPerUnit, u, window)
	r.mode = mode
	if m := o.GetUnitMultiplier(); m != nil && m.Value > 1 {
		r.unitMultiplier = m.Value
	}
	return r
}
