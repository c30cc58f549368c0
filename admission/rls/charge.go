package rls

import (
	"context"
	"slices"

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
// bucket, charged their costs' sum.
func (s *Service) charge(ctx context.Context, req *rlsv3.RateLimitRequest, tag string, vs []verdict, pending []int) error {
	if len(pending) == 1 { // the common call: one Take, nothing to gather
		v := &vs[pending[0]]
		r, err := s.store.Take(ctx, bucketKey(tag, req.Descriptors[pending[0]].Entries), v.rule.limit, v.cost)
		if err != nil {
			return storeError(ctx, err)
		}
		v.res, v.over = r, !r.Allowed
		return nil
	}
	takes := make([]ratelimit.Take, 0, len(pending))
	of := make([]int, len(pending)) // pending[j]'s take
	for j, i := range pending {
		k := bucketKey(tag, req.Descriptors[i].Entries)
		of[j] = -1
		for t := range takes {
			if takes[t].Key == k {
				of[j] = t
				takes[t].Cost += vs[i].cost
			}
		}
		if of[j] < 0 {
			of[j] = len(takes)
			takes = append(takes, ratelimit.Take{Key: k, Limit: vs[i].rule.limit, Cost: vs[i].cost})
		}
	}
	res, err := s.takeAll(ctx, takes)
	if err != nil {
		return err
	}
	enforcedOver, shadowOver := false, false
	for j, i := range pending {
		v := &vs[i]
		v.res = res[of[j]]
		v.over = !v.res.Allowed && (v.res.RetryAfter > 0 || len(takes) == 1)
		enforcedOver = enforcedOver || v.over && !s.shadowed(v)
		shadowOver = shadowOver || v.over && s.shadowed(v)
	}
	if enforcedOver || !shadowOver {
		return nil
	}
	// Only shadow descriptors refused: the request is admitted, so its
	// enforced descriptors pay.
	var enforced []ratelimit.Take
	var which []int
	for j, i := range pending {
		if !s.shadowed(&vs[i]) && !slices.Contains(which, of[j]) {
			enforced, which = append(enforced, takes[of[j]]), append(which, of[j])
		}
	}
	if len(enforced) == 0 {
		return nil
	}
	if res, err = s.takeAll(ctx, enforced); err != nil {
		return err
	}
	for j, i := range pending {
		if v := &vs[i]; !s.shadowed(v) {
			v.res = res[slices.Index(which, of[j])]
			v.over = !v.res.Allowed && (v.res.RetryAfter > 0 || len(enforced) == 1)
		}
	}
	return nil
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
