package admission

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/fairgate/fairgate/tenant"
)

// Options are a Gate's collaborators. The zero value is a working default:
// the embedded memory store, the system clock, a discarding logger.
type Options struct {
	// Store keeps the tenants' and the global token buckets. Nil means a
	// new MemoryStore.
	Store Store
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// Logger receives the gate's logs. Nil discards them.
	Logger *slog.Logger
}

// Gate is the admission pipeline. It is safe for concurrent use, and its
// configuration can be replaced at run time with Reload while requests are
// being decided.
type Gate struct {
	cfg    atomic.Pointer[compiled]
	store  Store
	unauth *MemoryStore
	now    func() time.Time
	log    *slog.Logger
}

// New builds a Gate. It checks cfg against the tenants' tiers and returns an
// error naming the field when anything is wrong; nothing is started.
func New(cfg Config, reg *tenant.Registry, o Options) (*Gate, error) {
	if reg == nil {
		return nil, errors.New("admission: nil tenant registry")
	}
	c, err := cfg.compile(reg)
	if err != nil {
		return nil, err
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Store == nil {
		o.Store = NewMemoryStore(MemoryStoreOptions{Now: o.Now})
	}
	g := &Gate{store: o.Store, now: o.Now, log: o.Logger,
		unauth: NewMemoryStore(MemoryStoreOptions{Now: o.Now})}
	g.cfg.Store(c)
	return g, nil
}

// Reload checks cfg and reg and, when both are good, makes them the gate's
// configuration for every request decided from now on. On error the old
// configuration stays. Buckets are kept: a changed quota applies to the
// tokens a tenant already has.
func (g *Gate) Reload(cfg Config, reg *tenant.Registry) error {
	if reg == nil {
		return errors.New("admission: nil tenant registry")
	}
	c, err := cfg.compile(reg)
	if err != nil {
		return err
	}
	g.cfg.Store(c)
	return nil
}

// Registry returns the tenant registry in force.
func (g *Gate) Registry() *tenant.Registry { return g.cfg.Load().reg }

// Request is what the pipeline needs to know of an HTTP request.
type Request struct {
	Method string
	// Path is the URL path, unescaped as net/http gives it.
	Path   string
	Header http.Header
	// RemoteAddr is the peer's address ("ip:port"), used only to limit
	// unauthenticated attempts.
	RemoteAddr string
}

// Check runs the pipeline for one request. It returns the decision; the
// error is for faults only (a cancelled context). When the decision is
// allowed, the caller must call Decision.Done once the request finishes.
func (g *Gate) Check(ctx context.Context, req Request) (Decision, error) {
	c := g.cfg.Load()
	var d Decision
	d.Route = c.routes.lookup(req.Method, req.Path)

	// identify
	key, ok := tenant.ExtractKey(req.Header)
	var t *tenant.Tenant
	if ok {
		t, ok = c.reg.Lookup(key)
	}
	if !ok {
		return g.rejectUnauthenticated(c, req, key != ""), nil
	}
	d.Tenant = t

	// rate
	if err := g.rate(ctx, c, &d); err != nil {
		return d, err
	}
	if d.Status != 0 {
		return d, nil
	}
	d.Allowed = true
	return d, nil
}

// rate runs the rate layer: the route group's bucket, the tenant's bucket,
// then the global backstop. Tokens taken by an earlier bucket are not given
// back when a later one says no: a refund would make a rejected request
// free, so a client retrying into an overload would pay nothing and the
// rate layer would stop bounding what reaches the later layers. The
// narrowest bucket goes first so that it is the one that usually says no.
func (g *Gate) rate(ctx context.Context, c *compiled, d *Decision) error {
	t, r := d.Tenant, d.Route
	if r.Group != "" {
		if q, ok := t.Groups[r.Group]; ok {
			l := Limit{Rate: q.Rate, Burst: q.Burst}
			res, err := g.store.Take(ctx, BucketKey{Tenant: t.ID, Scope: r.Group}, l, r.Cost)
			if err != nil {
				return g.storeFailed(ctx, d, err)
			}
			d.Quotas[1] = quotaState(r.Group, l, res)
			d.NQuotas = 2
			if !res.Allowed {
				g.reject(d, LayerRate, http.StatusTooManyRequests, "group_quota", res.RetryAfter)
				d.Quotas[0] = QuotaState{Name: "tenant", Limit: t.Burst, Window: window(Limit{t.Rate, t.Burst})}
				return nil
			}
		}
	}
	l := Limit{Rate: t.Rate, Burst: t.Burst}
	res, err := g.store.Take(ctx, BucketKey{Tenant: t.ID}, l, r.Cost)
	if err != nil {
		return g.storeFailed(ctx, d, err)
	}
	d.Quotas[0] = quotaState("tenant", l, res)
	if d.NQuotas == 0 {
		d.NQuotas = 1
	}
	if !res.Allowed {
		g.reject(d, LayerRate, http.StatusTooManyRequests, "tenant_quota", res.RetryAfter)
		return nil
	}
	if c.global != nil {
		res, err := g.store.Take(ctx, BucketKey{}, *c.global, r.Cost)
		if err != nil {
			return g.storeFailed(ctx, d, err)
		}
		if !res.Allowed {
			g.reject(d, LayerRate, http.StatusServiceUnavailable, "global_backstop", res.RetryAfter)
		}
	}
	return nil
}

// storeFailed applies the rate layer's failure rule: a context cancelled by
// the caller is returned as it is; any other store error means the store's
// own failure policy chose to fail closed, so the request gets a 503.
func (g *Gate) storeFailed(ctx context.Context, d *Decision, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	g.reject(d, LayerRate, http.StatusServiceUnavailable, "store_unavailable", time.Second)
	return nil
}

func (g *Gate) rejectUnauthenticated(c *compiled, req Request, presented bool) Decision {
	d := Decision{Route: c.routes.unmatched}
	ip := clientIP(req.RemoteAddr)
	res := g.unauth.TakeAt(g.now().UnixNano(), BucketKey{Tenant: ip, Scope: "unauthenticated"}, c.unauth, 1)
	switch {
	case !res.Allowed:
		g.reject(&d, LayerIdentify, http.StatusTooManyRequests, "too_many_failed_attempts", res.RetryAfter)
	case presented:
		g.reject(&d, LayerIdentify, http.StatusUnauthorized, "unknown_key", 0)
	default:
		g.reject(&d, LayerIdentify, http.StatusUnauthorized, "missing_key", 0)
	}
	return d
}

func (g *Gate) reject(d *Decision, l Layer, status int, reason string, retry time.Duration) {
	d.Allowed = false
	d.Layer = l
	d.Status = status
	d.Reason = reason
	d.RetryAfter = retry
}

func quotaState(name string, l Limit, r Result) QuotaState {
	return QuotaState{Name: name, Limit: l.Burst, Window: window(l), Remaining: r.Remaining, Reset: r.ResetAfter}
}

func window(l Limit) time.Duration { return secondsToDuration(l.Burst / l.Rate) }

// clientIP returns the host part of a "host:port" peer address.
func clientIP(addr string) string {
	if i := strings.LastIndexByte(addr, ':'); i >= 0 && !strings.HasSuffix(addr, "]") {
		addr = addr[:i]
	}
	return strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]")
}

// ceilSeconds returns d in whole seconds, rounded up, at least min.
func ceilSeconds(d time.Duration, min int64) int64 {
	s := int64(math.Ceil(d.Seconds()))
	if s < min {
		return min
	}
	return s
}

// permits holds what an admitted request took from the later layers.
type permits struct {
	release []func(ok bool)
}

func (p *permits) done(ok bool) {
	for i := len(p.release) - 1; i >= 0; i-- {
		p.release[i](ok)
	}
	p.release = nil
}

// TenantState is one tenant's state, for the admin view a support engineer
// reads when a tenant says it is being throttled.
type TenantState struct {
	ID   string  `json:"id"`
	Tier string  `json:"tier"`
	Rate float64 `json:"rate"`
	// Burst and Tokens describe the tenant's own bucket; Tokens is omitted
	// when the store cannot say without changing it.
	Burst         float64  `json:"burst"`
	Tokens        *float64 `json:"tokens,omitempty"`
	MaxConcurrent int      `json:"max_concurrent"`
}

// TenantState returns the state of the tenant with the given ID.
func (g *Gate) TenantState(id string) (TenantState, bool) {
	t, ok := g.cfg.Load().reg.ByID(id)
	if !ok {
		return TenantState{}, false
	}
	st := TenantState{ID: t.ID, Tier: t.Tier, Rate: t.Rate, Burst: t.Burst, MaxConcurrent: t.MaxConcurrent}
	if p, ok := g.store.(interface {
		Tokens(BucketKey, Limit) float64
	}); ok {
		tok := p.Tokens(BucketKey{Tenant: t.ID}, Limit{Rate: t.Rate, Burst: t.Burst})
		st.Tokens = &tok
	}
	return st, true
}
