package admission

import (
	"context"
	"errors"
	"github.com/fairgate/fairgate/shed"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// rate runs the rate layer (see takeBuckets) in its span. The error is a
// cancelled context only: a store that fails closed is a 503 decision.
func (g *Gate) rate(ctx context.Context, c *compiled, d *Decision) error {
	sp := g.layerSpan(ctx, SpanRate)
	err := g.takeBuckets(ctx, c, d)
	if sp.on() {
		q := &d.Quotas[0]
		sp.s.SetAttributes(attrCost.Float64(round3(d.Route.Cost)), attrRemaining.Float64(round3(q.Remaining)), attrLimit.Float64(round3(q.Limit)))
		if b := &d.backstop; d.hasBackstop {
			sp.s.SetAttributes(attrBackstopTokens.Float64(round3(b.Tokens)), attrBackstopUse.Float64(round3(b.Use)),
				attrBackstopShare.Float64(round3(b.Share)), attrBackstopWithin.Bool(b.WithinShare))
		}
		if d.Layer == LayerRate {
			sp.s.SetAttributes(attrBucket.String(d.Reason.String()))
			if d.Reason == ReasonStoreUnavailable {
				sp.s.SetAttributes(attrPolicy.String("fail_closed"))
			}
		}
	}
	sp.end(d, LayerRate)
	return err
}

// takeBuckets takes the route's cost from the route group's bucket and the
// tenant's bucket, then the global backstop. The group's and the tenant's
// buckets are taken all or nothing, in one store call when the store can
// (ratelimit.MultiStore: one lock, one Lua call): a request the tenant's
// bucket refuses must not have emptied its group's, or "retry after 3 s"
// would be followed by "retry after 37 s". Tokens taken by the tenant's
// buckets are not given back when the backstop says no: a refund would make
// a rejected request free, so a client retrying into an overload would pay
// nothing and the rate layer would stop bounding what reaches the later
// layers.
func (g *Gate) takeBuckets(ctx context.Context, c *compiled, d *Decision) error {
	t, r := d.Tenant, d.Route
	if r.Group != "" {
		if q, ok := t.Groups[r.Group]; ok {
			if ms, ok := g.store.(ratelimit.MultiStore); ok {
				if err := g.takeGrouped(ctx, ms, d, ratelimit.Limit{Rate: q.Rate, Burst: q.Burst}); err != nil || d.Status != 0 {
					return err
				}
				return g.takeBackstop(ctx, c, d)
			}
			l := ratelimit.Limit{Rate: q.Rate, Burst: q.Burst}
			res, err := g.take(ctx, ratelimit.BucketKey{Tenant: t.ID, Scope: r.Group}, l, r.Cost)
			if err != nil {
				return g.storeFailed(ctx, d, err)
			}
			d.Quotas[1] = quotaState(r.Group, l, res)
			d.NQuotas = 2
			if !res.Allowed {
				d.reject(ReasonGroupQuota, res.RetryAfter)
				// Report the bucket that decided; the tenant's own was
				// not consulted, so its state is unknown here.
				d.Quotas[0], d.Quotas[1], d.NQuotas = d.Quotas[1], QuotaState{}, 1
				return nil
			}
		}
	}
	l := ratelimit.Limit{Rate: t.Rate, Burst: t.Burst}
	res, err := g.take(ctx, ratelimit.BucketKey{Tenant: t.ID}, l, r.Cost)
	if err != nil {
		return g.storeFailed(ctx, d, err)
	}
	d.Quotas[0] = quotaState("tenant", l, res)
	if d.NQuotas == 0 {
		d.NQuotas = 1
	}
	if !res.Allowed {
		d.reject(ReasonTenantQuota, res.RetryAfter)
		return nil
	}
	return g.takeBackstop(ctx, c, d)
}

// takeBackstop takes the route's cost from the global backstop, if any.
func (g *Gate) takeBackstop(ctx context.Context, c *compiled, d *Decision) error {
	t, r := d.Tenant, d.Route
	if c.global != nil {
		res, err := g.backstop.TakeBackstop(ctx, *c.global, ratelimit.BackstopRequest{Tenant: t.ID, Weight: t.Weight, Cost: r.Cost, Class: backstopClass(d.Priority)})
		if err != nil {
			return g.storeFailed(ctx, d, err)
		}
		d.backstop, d.hasBackstop = res, true
		if !res.Allowed {
			// Only a tenant above its fair share of the global rate is
			// refused while another is within its own: an overload
			// (503), caused by this tenant's share of the traffic.
			d.reject(ReasonGlobalBackstop, res.RetryAfter)
		}
	}
	return nil
}

// take is the store's Take, timed for fairgate_store_take_seconds when
// metrics are on.
func (g *Gate) take(ctx context.Context, k ratelimit.BucketKey, l ratelimit.Limit, cost float64) (ratelimit.Result, error) {
	if g.metrics == nil {
		return g.store.Take(ctx, k, l, cost)
	}
	start := time.Now()
	res, err := g.store.Take(ctx, k, l, cost)
	g.metrics.storeTake.Observe(time.Since(start).Seconds())
	return res, err
}

// storeFailed applies the rate layer's failure rule: a context cancelled by
// the caller is returned as it is; a take the store refused as invalid is
// a logged 500 (a bug or a config validation missed, not an outage); any
// other store error means the store's own failure policy chose to fail
// closed, so the request gets a 503.
func (g *Gate) storeFailed(ctx context.Context, d *Decision, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	if errors.Is(err, ratelimit.ErrInvalidTake) {
		g.log.ErrorContext(ctx, "rate store refused a take as invalid", "route", d.Route.Name, "err", err)
		d.reject(ReasonInvalidTake, 0)
		return nil
	}
	retry := time.Second
	var h interface{ RetryAfterHint() time.Duration }
	if errors.As(err, &h) && h.RetryAfterHint() > 0 {
		retry = h.RetryAfterHint()
	}
	d.reject(ReasonStoreUnavailable, retry)
	if g.metrics != nil {
		g.metrics.storeErrs.WithLabelValues("fail_closed").Inc()
	}
	return nil
}

func quotaState(name string, l ratelimit.Limit, r ratelimit.Result) QuotaState {
	return QuotaState{Name: name, Limit: l.Burst, Window: l.Window(), Remaining: r.Remaining, Reset: r.ResetAfter,
		StateUnknown: r.StateUnknown}
}

// backstopClass is the backstop's class of a request of priority p: its
// criticality band (a trusted caller's priority falls in one too).
func backstopClass(p shed.Priority) ratelimit.BackstopClass {
	switch {
	case p >= shed.PriorityFor(0, shed.Critical):
		return ratelimit.BackstopCritical
	case p >= shed.PriorityFor(0, shed.Default):
		return ratelimit.BackstopDefault
	}
	return ratelimit.BackstopSheddable
}

// takeGrouped takes a grouped route's cost from the group's and the
// tenant's buckets in one all-or-nothing store call. Refused, the reason
// is the bucket with the longer wait and Retry-After that wait: when it has
// passed, both buckets hold the cost.
func (g *Gate) takeGrouped(ctx context.Context, ms ratelimit.MultiStore, d *Decision, gl ratelimit.Limit) error {
	t, r := d.Tenant, d.Route
	tl := ratelimit.Limit{Rate: t.Rate, Burst: t.Burst}
	takes := [2]ratelimit.Take{
		{Key: ratelimit.BucketKey{Tenant: t.ID, Scope: r.Group}, Limit: gl, Cost: r.Cost},
		{Key: ratelimit.BucketKey{Tenant: t.ID}, Limit: tl, Cost: r.Cost},
	}
	var start time.Time
	if g.metrics != nil {
		start = time.Now()
	}
	res, err := ms.TakeAll(ctx, takes[:])
	if g.metrics != nil {
		g.metrics.storeTake.Observe(time.Since(start).Seconds())
	}
	if err != nil {
		return g.storeFailed(ctx, d, err)
	}
	d.Quotas[0], d.Quotas[1], d.NQuotas = quotaState("tenant", tl, res[1]), quotaState(r.Group, gl, res[0]), 2
	if !res[1].Allowed {
		if res[0].RetryAfter > res[1].RetryAfter {
			d.reject(ReasonGroupQuota, res[0].RetryAfter)
		} else {
			d.reject(ReasonTenantQuota, res[1].RetryAfter)
		}
	}
	return nil
}
