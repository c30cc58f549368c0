package rls

import (
	"context"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/fairgate/fairgate/admission/ratelimit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// shadowed reports whether v's descriptor is in shadow mode (its own
// shadow_mode, or rls.shadow).
func (s *Service) shadowed(v *verdict) bool { return v.shadow || s.shadow }

// charge charges a request's descriptors, the verdicts at pending (at
// least one): it takes their buckets all or nothing, as the HTTP path
// takes a tenant's buckets: a request is charged only when every
// descriptor not in shadow mode has room, so a refused request costs none
// of its descriptors anything, and "retry after 2 s" is not followed by
// "retry after 40 s" because another descriptor's bucket was emptied by
// the refused calls. Shadow descriptors are taken with the others, as
// they would be enforced, so their figures are real; when only they
// refuse, the request is admitted and the enforced descriptors are
// charged by a second call. Two descriptors with the same entries are one
// bucket, charged their costs' sum. Its cost is linear in the number of
// descriptors.
func (s *Service) charge(ctx context.Context, req *rlsv3.RateLimitRequest, tag string, vs []verdict, pending []int) error {
	if len(pending) == 1 { // the common call: one Take, nothing to gather
		v := &vs[pending[0]]
		r, err := s.store.Take(ctx, v.key(tag, matchEntries(req, vs, pending[0])), v.limit, v.cost)
		if err != nil {
			return storeError(ctx, err)
		}
		v.res, v.over = r, !r.Allowed
		return nil
	}
	takes, of := gather(req, tag, vs, pending)
	res, err := s.takeAll(ctx, takes)
	if err != nil {
		return err
	}
	softOver := false // a descriptor in its own shadow mode or a quota over its limit
	for j, i := range pending {
		v := &vs[i]
		t := &takes[of[j]]
		v.res = res[of[j]]
		v.over = lacked(v.res, t.Limit, t.Cost, len(takes))
		softOver = softOver || v.over && (v.shadow || v.rule.quotaMode)
	}
	if !softOver || s.refused(vs, true) {
		return nil
	}
	if _, multi := s.store.(ratelimit.MultiStore); !multi {
		return nil // each take was its own: the enforced ones with room are charged already
	}
	// Only descriptors in shadow mode, or quotas that did not refuse the
	// request, are over: it is admitted, so its enforced descriptors
	// with room pay.
	enforced := make([]ratelimit.Take, 0, len(takes))
	at := make([]int, len(takes)) // takes[t]'s index in enforced, or -1
	for t := range at {
		at[t] = -1
	}
	for j, i := range pending {
		if v := &vs[i]; v.rule.quotaMode && v.over {
			at[of[j]] = -2 // not charged: its bucket has no room
		}
	}
	for j, i := range pending {
		if t := of[j]; !vs[i].shadow && at[t] == -1 {
			at[t] = len(enforced)
			enforced = append(enforced, takes[t])
		}
	}
	if len(enforced) == 0 {
		return nil
	}
	if res, err = s.takeAll(ctx, enforced); err != nil {
		return err
	}
	for j, i := range pending {
		if v := &vs[i]; !v.shadow && at[of[j]] >= 0 {
			t := &enforced[at[of[j]]]
			v.res = res[at[of[j]]]
			v.over = lacked(v.res, t.Limit, t.Cost, len(enforced))
		}
	}
	return nil
}

// refused reports whether vs refuse their request, by
// envoyproxy/ratelimit's quota_mode rule: a limited descriptor not in
// shadow mode is over its limit and is not a quota, or every quota
// descriptor is over (one in shadow mode is a quota never over; an
// unlimited or replaced one is no quota). own leaves rls.shadow out: what
// is charged is what enforcement would charge. A verdict not decided yet
// is not over.
func (s *Service) refused(vs []verdict, own bool) bool {
	quotas, quotasOver := 0, 0
	for i := range vs {
		v := &vs[i]
		if v.rule == nil || v.outcome == OutcomeUnlimited || v.settle {
			continue
		}
		shadow := v.shadow || !own && s.shadow
		switch {
		case v.rule.quotaMode:
			quotas++
			if v.over && !shadow {
				quotasOver++
			}
		case v.over && !shadow:
			return true
		}
	}
	return quotas > 0 && quotasOver == quotas
}

// scanTakes is the most takes gather looks through for a bucket already
// gathered; beyond, it finds it in a map. Below it a scan of a few
// strings costs less than a map; above it the scan grows with the square
// of the descriptors.
const scanTakes = 16

// gather makes the takes of the verdicts at pending: one per bucket, the
// costs of one bucket's descriptors summed. of[j] is pending[j]'s take.
func gather(req *rlsv3.RateLimitRequest, tag string, vs []verdict, pending []int) (takes []ratelimit.Take, of []int) {
	takes = make([]ratelimit.Take, 0, len(pending))
	of = make([]int, len(pending))
	var index map[ratelimit.BucketKey]int // nil while the takes are few
	for j, i := range pending {
		k := vs[i].key(tag, matchEntries(req, vs, i))
		t, found := -1, false
		if index != nil {
			t, found = index[k]
		} else {
			for x := range takes {
				if takes[x].Key == k {
					t, found = x, true
					break
				}
			}
		}
		if found {
			takes[t].Cost += vs[i].cost
			of[j] = t
			continue
		}
		of[j] = len(takes)
		takes = append(takes, ratelimit.Take{Key: k, Limit: vs[i].limit, Cost: vs[i].cost})
		switch {
		case index != nil:
			index[k] = of[j]
		case len(takes) > scanTakes:
			index = make(map[ratelimit.BucketKey]int, len(pending))
			for x := range takes {
				index[takes[x].Key] = x
			}
		}
	}
	return takes, of
}

// takeAll takes takes all or nothing: one TakeAll when the store can
// (the embedded and the Redis stores), else one Take each (not atomic). A
// store error is Unavailable; a cancelled call its context's status.
func (s *Service) takeAll(ctx context.Context, takes []ratelimit.Take) ([]ratelimit.Result, error) {
	var res []ratelimit.Result
	var err error
	if ms, ok := s.store.(ratelimit.MultiStore); ok && len(takes) > 1 {
		res, err = ms.TakeAll(ctx, takes)
	} else {
		res = make([]ratelimit.Result, len(takes))
		for i, t := range takes {
			if res[i], err = s.store.Take(ctx, t.Key, t.Limit, t.Cost); err != nil {
				break
			}
		}
	}
	if err != nil {
		return nil, storeError(ctx, err)
	}
	return res, nil
}

// storeError is the status of a call the store could not decide: its
// context's when cancelled, else Unavailable (so Envoy's
// failure_mode_deny decides).
func storeError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	return status.Errorf(codes.Unavailable, "rls: rate store: %v", err)
}
