package rls

import (
	"math"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// response builds the answer from the verdicts, one status per
// descriptor, as envoyproxy/ratelimit fills them where Envoy can tell:
//
//   - a limited descriptor whose bucket is known carries current_limit,
//     limit_remaining and duration_until_reset; an OVER_LIMIT one always
//     does, limit_remaining 0, even when the store remembered the denial
//     rather than read the bucket (the rule and the wait are known; what
//     is left is not enough). An admission the store decided without
//     reading the bucket (fail_open, sync mode with several instances)
//     carries none of them: nothing sure is known to tell.
//   - a descriptor over its limit is OVER_LIMIT under rls.shadow, while
//     the overall code stays OK; its own shadow_mode answers OK.
//   - rate_limit {unlimited: true} answers limit_remaining 4294967295 and
//     no current_limit; a replaced, unmatched or not charged descriptor
//     answers a bare OK.
func (s *Service) response(vs []verdict, decider *verdict) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(vs))}
	// One allocation for all statuses, and one for all limits and
	// durations when there are any, whatever the descriptors.
	sts := make([]rlsv3.RateLimitResponse_DescriptorStatus, len(vs))
	var lims []rlsv3.RateLimitResponse_RateLimit
	var durs []durationpb.Duration
	var retry time.Duration
	for i := range vs {
		v := &vs[i]
		st := &sts[i]
		st.Code = rlsv3.RateLimitResponse_OK
		resp.Statuses[i] = st
		switch {
		case v.outcome == OutcomeUnlimited && v.rule.unlimited:
			st.LimitRemaining = math.MaxUint32
			continue
		case !limited(v):
			continue
		}
		if known(v) {
			if lims == nil {
				lims, durs = make([]rlsv3.RateLimitResponse_RateLimit, len(vs)), make([]durationpb.Duration, len(vs))
			}
			st.CurrentLimit = v.rule.current(&lims[i])
			d := untilReset(v)
			durs[i].Seconds, durs[i].Nanos = int64(d/time.Second), int32(d%time.Second)
			st.DurationUntilReset = &durs[i]
			if !v.over {
				st.LimitRemaining = uint32(min(math.Floor(v.res.Remaining), math.MaxUint32))
			}
		}
		if v.over && !v.shadow {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if v.outcome == OutcomeReject {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			retry = max(retry, v.res.RetryAfter)
		}
	}
	if s.headers && decider != nil {
		resp.ResponseHeadersToAdd = headers(vs, decider, resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT, retry)
	}
	return resp
}

// limited reports whether v was decided by a bucket: admitted, rejected,
// rejected in shadow mode or a quota over its limit.
func limited(v *verdict) bool {
	return v.outcome == OutcomeAdmit || v.outcome == OutcomeReject || v.outcome == OutcomeShadowReject || v.outcome == OutcomeQuotaOver
}

// known reports whether v's state may be told: the store read its bucket,
// or it is over its limit (then the wait is known and nothing is left
// for this request).
func known(v *verdict) bool { return !v.res.StateUnknown || v.over }

// remaining is what v tells of its bucket's tokens: none when over (as
// envoyproxy/ratelimit answers every OVER_LIMIT), else the whole tokens
// left.
func remaining(v *verdict) float64 {
	if v.over {
		return 0
	}
	return math.Floor(v.res.Remaining)
}

// untilReset is a descriptor's duration_until_reset: when over, the time
// until its bucket holds the request's cost (what Retry-After says);
// else the time until the bucket is full.
func untilReset(v *verdict) time.Duration {
	if v.over {
		return v.res.RetryAfter
	}
	return v.res.ResetAfter
}

// current fills c, a zero value, with the rule as Envoy's current_limit,
// and returns it. Its name is the rate_limit's configured name, empty
// when it has none or for a request-level override, as
// envoyproxy/ratelimit fills it.
func (r *rule) current(c *rlsv3.RateLimitResponse_RateLimit) *rlsv3.RateLimitResponse_RateLimit {
	c.Name, c.RequestsPerUnit, c.Unit = r.responseName(), r.requestsPerUnit, responseUnits[r.unit]
	if r.unitMultiplier > 1 {
		c.UnitMultiplier = wrapUint32(r.unitMultiplier)
	}
	return c
}

// responseName is current_limit.name: the rate_limit's name as written.
func (r *rule) responseName() string { return r.configuredName }

var responseUnits = [...]rlsv3.RateLimitResponse_RateLimit_Unit{
	UnitNone: rlsv3.RateLimitResponse_RateLimit_UNKNOWN, UnitSecond: rlsv3.RateLimitResponse_RateLimit_SECOND,
	UnitMinute: rlsv3.RateLimitResponse_RateLimit_MINUTE, UnitHour: rlsv3.RateLimitResponse_RateLimit_HOUR,
	UnitDay: rlsv3.RateLimitResponse_RateLimit_DAY, UnitWeek: rlsv3.RateLimitResponse_RateLimit_WEEK,
	UnitMonth: rlsv3.RateLimitResponse_RateLimit_MONTH, UnitYear: rlsv3.RateLimitResponse_RateLimit_YEAR,
}
