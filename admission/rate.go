package admission

import (
	"context"
	"errors"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/shed"
	"github.com/fairgate/fairgate/tenant"
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
		if d.ShadowRejected != ReasonNone {
			sp.s.SetAttributes(AttrShadowReject.Bool(true), attrBucket.String(d.ShadowRejected.String()))
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

// takeBuckets takes the route's cost from the tenant's own buckets (see
// takeQuotas), then from the global backstop. When shadow mode covers the
// request (its tenant, tier or route), a refusal by the tenant's own
// buckets is recorded (Decision.ShadowRejected) and the request goes on:
// the buckets decided and took what they take as usual, so the figures
// are real. The backstop and the later layers stay enforced: they protect
// the service, not a tenant's contract. Tokens taken by the tenant's
// buckets are not given back when the backstop says no: a refund would
// make a rejected request free, so a client retrying into an overload
// would pay nothing and the rate layer would stop bounding what reaches
// the later layers.
func (g *Gate) takeBuckets(ctx context.Context, c *compiled, d *Decision) error {
	if err := g.takeQuotas(ctx, c, d); err != nil {
		return err
	}
	if d.Status != 0 {
		if !d.Tenant.Shadow && !d.Route.Shadow || !d.Reason.quota() {
			return nil
		}
		d.ShadowRejected = d.Reason
		g.logShadow(ctx, d, d.RetryAfter)
		d.Allowed, d.Status, d.Layer, d.Reason, d.RetryAfter, d.detail = false, 0, LayerNone, ReasonNone, 0, ""
	}
	if d.Exempt {
		return nil // the backstop is shared
	}
	return g.takeBackstop(ctx, c, d)
}

// takeQuotas takes the route's cost from the tenant's bucket, its route
// group's and its limits. They are taken all or nothing, in one store call
// when the store can (ratelimit.MultiStore: one lock, one Lua call): a
// request the tenant's bucket refuses must not have emptied its group's,
// or "retry after 3 s" would be followed by "retry after 37 s". A store
// that cannot takes the group's bucket, then the tenant's (New refuses
// limits on such a store).
func (g *Gate) takeQuotas(ctx context.Context, c *compiled, d *Decision) error {
	t, r := d.Tenant, d.Route
	gq, grouped := t.Groups[r.Group]
	grouped = grouped && r.Group != ""
	if ms, ok := g.store.(ratelimit.MultiStore); ok && (grouped || len(t.Limits) > 0 || t.Mode != tenant.ModeStore || r.settle != nil) {
		return g.takeAll(ctx, c, ms, d, gq, grouped)
	}
	if grouped {
		l := ratelimit.Limit{Rate: gq.Rate, Burst: gq.Burst}
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
	}
	return nil
}

// takeBackstop takes the route's cost from the global backstop, if any.
func (g *Gate) takeBackstop(ctx context.Context, c *compiled, d *Decision) error {
	t, r := d.Tenant, d.Route
	if c.global != nil {
		cost := r.Cost
		if d.lease.settle.st != nil {
			cost = d.lease.settle.reserved // the settled route's reserve, learned or not
		}
		res, err := g.backstop.TakeBackstop(ctx, *c.global, ratelimit.BackstopRequest{Tenant: t.ID, Weight: t.Weight, Cost: cost, Class: backstopClass(d.Priority)})
		if err != nil {
			return g.storeFailed(ctx, d, err)
		}
		d.backstop, d.hasBackstop = res, true
		if res.Allowed && d.lease.settle.st != nil {
			// Settled at the backstop too: fair shares by what tenants used.
			d.lease.settle.global = c.global
		}
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
	if !g.timeTakes {
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
		StateUnknown: r.StateUnknown, Wait: r.RetryAfter}
}

// tightest returns the index of the bucket that binds d most: among those
// whose state is known, the one that refused with the longest wait, else
// the one with the fewest tokens left; -1 when no state is known.
func (d *Decision) tightest() int {
	low := -1
	for i := range d.NQuotas {
		q := &d.Quotas[i]
		if q.Name == "" || q.StateUnknown {
			continue
		}
		if low < 0 || q.Wait > d.Quotas[low].Wait || q.Wait == d.Quotas[low].Wait && q.Remaining < d.Quotas[low].Remaining {
			low = i
		}
	}
	return low
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

// takeAll takes the route's cost from the tenant's bucket, its route
// group's (when grouped) and each of its limits in one all-or-nothing
// store call. Refused, the reason is the bucket with the longest wait
// (the tenant's own on a tie) and Retry-After that wait: when it has
// passed, every bucket holds the cost.
func (g *Gate) takeAll(ctx context.Context, c *compiled, ms ratelimit.MultiStore, d *Decision, gq tenant.Quota, grouped bool) error {
	t, r := d.Tenant, d.Route
	var takes [MaxQuotas]ratelimit.Take
	mode := storeMode(t.Mode)
	takes[0] = ratelimit.Take{Key: ratelimit.BucketKey{Tenant: t.ID}, Limit: ratelimit.Limit{Rate: t.Rate, Burst: t.Burst}, Cost: r.Cost, Mode: mode}
	n := 1
	if grouped {
		takes[n] = ratelimit.Take{Key: ratelimit.BucketKey{Tenant: t.ID, Scope: r.Group}, Limit: ratelimit.Limit{Rate: gq.Rate, Burst: gq.Burst}, Cost: r.Cost, Mode: mode}
		n++
	}
	firstLimit := n
	scopes, windows := c.limitScopes[t], c.limitWindows[t]
	var now time.Time
	for i, l := range t.Limits {
		lim := ratelimit.Limit{Rate: l.Rate, Burst: l.Burst}
		if windows != nil && !windows[i].IsZero() {
			if now.IsZero() {
				now = g.now()
			}
			lim = windows[i].Limit(l.Burst, now)
		}
		takes[n] = ratelimit.Take{Key: ratelimit.BucketKey{Tenant: t.ID, Scope: scopes[i]}, Limit: lim, Cost: r.Cost, Mode: storeMode(l.Mode)}
		n++
	}
	reserved := r.Cost
	if r.settle != nil && r.settle.learn {
		// The reserve this tenant's requests of the route have used
		// lately, within what every bucket (and the backstop) can hold.
		reserved = r.settle.reserveFor(t.ID)
		for i := range n {
			reserved = min(reserved, takes[i].Limit.Burst)
		}
		if c.global != nil {
			reserved = min(reserved, c.global.Burst)
		}
		reserved = max(reserved, r.Cost)
		for i := range n {
			takes[i].Cost = reserved
		}
	}
	var start time.Time
	if g.timeTakes {
		start = time.Now()
	}
	res, err := ms.TakeAll(ctx, takes[:n])
	if g.timeTakes {
		g.metrics.storeTake.Observe(time.Since(start).Seconds())
	}
	if err != nil {
		return g.storeFailed(ctx, d, err)
	}
	worst := -1
	for i := range n {
		name := "tenant"
		switch {
		case i >= firstLimit:
			name = t.Limits[i-firstLimit].Name
		case i > 0:
			name = r.Group
		}
		d.Quotas[i] = quotaState(name, takes[i].Limit, res[i])
		if !res[i].Allowed && (worst < 0 || res[i].RetryAfter > res[worst].RetryAfter) {
			worst = i
		}
	}
	d.NQuotas = n
	if worst < 0 && r.settle != nil && !uncharged(res) {
		// Charged: settled at Release, on the same buckets.
		d.lease.settle.st, d.lease.settle.n, d.lease.settle.takes = r.settle, n, new([MaxQuotas]ratelimit.Take)
		d.lease.settle.reserved, d.lease.settle.tenant = reserved, t.ID
		copy(d.lease.settle.takes[:], takes[:n])
	}
	switch {
	case worst < 0:
	case worst >= firstLimit:
		d.reject(ReasonLimitQuota, res[worst].RetryAfter)
		d.detail = d.Quotas[worst].Name
	case worst > 0:
		d.reject(ReasonGroupQuota, res[worst].RetryAfter)
	default:
		d.reject(ReasonTenantQuota, res[worst].RetryAfter)
	}
	return nil
}

// logShadow logs a request shadow mode admitted, at most once per
// shadowLogEvery per tenant (the tenants are the configured ones, so the
// map is bounded).
func (g *Gate) logShadow(ctx context.Context, d *Decision, retry time.Duration) {
	now := g.now()
	g.shadowMu.Lock()
	last, seen := g.shadowLast[d.Tenant.ID]
	ok := !seen || now.Sub(last) >= g.shadowLogEvery
	if ok {
		g.shadowLast[d.Tenant.ID] = now
	}
	g.shadowMu.Unlock()
	if !ok {
		return
	}
	bucket := "unknown" // a remembered denial: no state read
	if i := d.tightest(); i >= 0 {
		bucket = d.Quotas[i].Name
	}
	g.log.InfoContext(ctx, "rate shadow mode: would have rejected", "tenant", d.Tenant.ID, "tier", d.Tenant.Tier,
		"route", d.Route.Name, "reason", d.Reason.String(), "bucket", bucket, "retry_after", retry.String())
}

// quota reports whether r is a refusal by one of the tenant's own buckets:
// what shadow mode covers.
func (r Reason) quota() bool {
	return r == ReasonTenantQuota || r == ReasonGroupQuota || r == ReasonLimitQuota
}

// storeMode is m for the store.
func storeMode(m tenant.Mode) ratelimit.Mode {
	switch m {
	case tenant.ModeExact:
		return ratelimit.ModeExact
	case tenant.ModeSync:
		return ratelimit.ModeSync
	}
	return ratelimit.ModeStore
}
