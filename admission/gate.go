package admission

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/bulkhead"
	"github.com/fairgate/fairgate/shed"
	"github.com/fairgate/fairgate/tenant"
)

// Options are a Gate's collaborators. The zero value is a working default:
// the embedded memory store, the system clock, a discarding logger.
type Options struct {
	// Store keeps the tenants' and the global token buckets. Nil means a
	// new MemoryStore.
	Store ratelimit.Store
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// Logger receives the gate's logs. Nil discards them.
	Logger *slog.Logger
	// DeferAdaptive moves the adaptive permit from Check to the upstream
	// call itself: the caller brackets the call with
	// Decision.StartUpstream and Decision.UpstreamAnswered. A reverse
	// proxy should, so that client I/O never counts as upstream latency.
	DeferAdaptive bool
	// Instances is how many gateway instances share the store. Concurrency
	// caps are kept per instance, so each instance enforces
	// ceil(max_concurrent / Instances). Zero means 1.
	Instances int
	// TracerProvider makes the layer spans (admission.identify, …) as
	// children of the span in the request's context, when that span is
	// recording. Nil means no layer spans.
	TracerProvider trace.TracerProvider
	// Metrics records decisions, queue waits and store latency, and
	// reports the gate's gauges (pool occupancy, shed thresholds, the
	// adaptive limit) to the registry they were built on. Nil means none.
	Metrics *Metrics
}

// Gate is the admission pipeline. It is safe for concurrent use, and its
// configuration can be replaced at run time with Reload while requests are
// being decided.
type Gate struct {
	cfg       atomic.Pointer[compiled]
	store     ratelimit.Store
	unauth    *ratelimit.MemoryStore
	now       func() time.Time
	log       *slog.Logger
	instances int
	// deferAdaptive: the permit is taken by Decision.StartUpstream.
	deferAdaptive bool
	tracer        trace.Tracer // nil: no layer spans
	metrics       *Metrics     // nil: no metrics

	// The later layers keep state across reloads; nil means off.
	caps     *bulkhead.Caps
	pools    *bulkhead.Pools
	limiter  *shed.Limiter
	shedders map[string]*poolShed // by pool name; "" when there are no pools
	reloadMu sync.Mutex
	layerCfg layerConfig // what built the layers; guarded by reloadMu
}

// poolShed is one pool's shedder and the counters it learns from.
type poolShed struct {
	shedder     *shed.Shedder
	queueCap    int
	completed   atomic.Uint64
	nextObserve atomic.Int64 // Unix ns
	every       int64        // ns between observations
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
		o.Store = ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{Now: o.Now})
	}
	if o.Instances < 1 {
		o.Instances = 1
	}
	g := &Gate{store: o.Store, now: o.Now, log: o.Logger, instances: o.Instances, deferAdaptive: o.DeferAdaptive,
		unauth: ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{Now: o.Now}), caps: bulkhead.NewCaps()}
	if err := g.buildLayers(cfg); err != nil {
		return nil, err
	}
	g.layerCfg = layerConfig{Bulkhead: cfg.Bulkhead, Adaptive: cfg.Adaptive, Shedding: cfg.Shedding}
	if o.TracerProvider != nil {
		g.tracer = o.TracerProvider.Tracer("github.com/fairgate/fairgate/admission")
	}
	if o.Metrics != nil {
		if err := o.Metrics.reg.Register(newGateCollector(g)); err != nil {
			return nil, fmt.Errorf("admission: register metrics: %w", err)
		}
		g.metrics = o.Metrics
	}
	g.cfg.Store(c)
	return g, nil
}

// buildLayers builds the bulkhead pools, the adaptive limiter and the
// shedders from a config compile has checked.
func (g *Gate) buildLayers(cfg Config) error {
	if cfg.Bulkhead != nil {
		pools, err := bulkhead.NewPools(*cfg.Bulkhead)
		if err != nil {
			return err
		}
		g.pools = pools
	}
	if cfg.Adaptive != nil {
		var opts []shed.LimiterOption
		if g.pools != nil {
			opts = append(opts, shed.OnLimitChange(g.pools.SetTotal))
		}
		l, err := shed.NewLimiter(*cfg.Adaptive, opts...)
		if err != nil {
			return err
		}
		g.limiter = l
		if g.pools != nil {
			g.pools.SetTotal(l.Limit())
		}
	}
	sc := shed.SheddingConfig{}
	if cfg.Shedding != nil {
		sc = *cfg.Shedding
	}
	if sc.Disabled || g.pools == nil && g.limiter == nil {
		return nil
	}
	newShed := func(queueCap int) (*poolShed, error) {
		s, err := shed.NewShedder(sc)
		if err != nil {
			return nil, err
		}
		every := sc.CalibrationInterval
		if every == 0 {
			every = shed.DefaultCalibrationInterval
		}
		return &poolShed{shedder: s, queueCap: queueCap, every: int64(every / 20)}, nil
	}
	g.shedders = map[string]*poolShed{}
	if g.pools == nil {
		ps, err := newShed(0)
		if err != nil {
			return err
		}
		g.shedders[""] = ps
		return nil
	}
	for name, pc := range cfg.Bulkhead.Pools {
		ps, err := newShed(pc.QueueLength)
		if err != nil {
			return err
		}
		g.shedders[name] = ps
	}
	return nil
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
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	if err := g.checkLayerChange(cfg); err != nil {
		return err
	}
	g.cfg.Store(c)
	g.layerCfg = layerConfig{Bulkhead: cfg.Bulkhead, Adaptive: cfg.Adaptive, Shedding: cfg.Shedding}
	if g.pools != nil && g.limiter == nil {
		g.pools.SetTotal(cfg.Bulkhead.Total) // seated requests keep their seats
	}
	return nil
}

// layerConfig is the part of Config that built the stateful layers.
type layerConfig struct {
	Bulkhead *bulkhead.Config
	Adaptive *shed.AdaptiveConfig
	Shedding *shed.SheddingConfig
}

// checkLayerChange accepts a reload only if the stateful layers can follow
// it without being rebuilt: the same pools with the same settings (the
// total may change), the same adaptive and shedding settings. Anything
// else needs a restart, and the reload is refused so that the old config
// stays whole.
func (g *Gate) checkLayerChange(cfg Config) error {
	old := g.layerCfg
	if (old.Bulkhead == nil) != (cfg.Bulkhead == nil) {
		return errors.New("bulkhead: adding or removing the bulkhead section needs a restart")
	}
	if old.Bulkhead != nil && !maps.Equal(old.Bulkhead.Pools, cfg.Bulkhead.Pools) {
		return errors.New("bulkhead.pools: changing pools needs a restart (bulkhead.total can change on reload)")
	}
	if !equalPtr(old.Adaptive, cfg.Adaptive) {
		return errors.New("adaptive: changing the adaptive limit needs a restart")
	}
	if !equalPtr(old.Shedding, cfg.Shedding) {
		return errors.New("shedding: changing shedding needs a restart")
	}
	return nil
}

func equalPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
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
	// Priority, when HasPriority, replaces the priority the tier and
	// route would give (a trusted internal caller's X-Fairgate-Priority;
	// see Config.TrustedPriorityFrom). The middleware sets it; nothing
	// else should.
	Priority    shed.Priority
	HasPriority bool
}

// Check runs the pipeline for one request. It returns the decision; the
// error is for faults only (a cancelled context). When the decision is
// allowed, the caller must call Decision.Done once the request finishes.
func (g *Gate) Check(ctx context.Context, req Request) (Decision, error) {
	d, err := g.check(ctx, req)
	if g.metrics != nil && err == nil {
		g.metrics.count(&d)
	}
	return d, err
}

func (g *Gate) check(ctx context.Context, req Request) (Decision, error) {
	c := g.cfg.Load()
	var d Decision
	d.Route = c.routes.lookup(req.Method, req.Path)

	// identify
	sp := g.layerSpan(ctx, SpanIdentify)
	key, ok := tenant.ExtractKey(req.Header)
	var t *tenant.Tenant
	if ok {
		t, ok = c.reg.Lookup(key)
	}
	if !ok {
		d = g.rejectUnauthenticated(c, req, key != "")
		if sp.on() {
			sp.s.SetAttributes(attrAuth.String(d.Reason))
		}
		sp.end(&d, LayerIdentify)
		return d, nil
	}
	d.Tenant = t
	d.Priority = shed.PriorityFor(t.Rank, d.Route.Criticality)
	if req.HasPriority {
		d.Priority = req.Priority
	}
	if sp.on() {
		sp.s.SetAttributes(attrAuth.String("ok"), AttrTenantID.String(t.ID), AttrTenantTier.String(t.Tier))
	}
	sp.end(&d, LayerIdentify)

	// rate
	sp = g.layerSpan(ctx, SpanRate)
	err := g.rate(ctx, c, &d)
	if sp.on() {
		q := &d.Quotas[0]
		sp.s.SetAttributes(attrCost.Float64(d.Route.Cost), attrRemaining.Float64(q.Remaining), attrLimit.Float64(q.Limit))
		if d.Layer == LayerRate {
			sp.s.SetAttributes(attrBucket.String(d.Reason))
			if d.Reason == "store_unavailable" {
				sp.s.SetAttributes(attrPolicy.String("fail_closed"))
			}
		}
	}
	sp.end(&d, LayerRate)
	if err != nil {
		return d, err
	}
	if d.Status != 0 {
		return d, nil
	}
	// A panic in a later layer (a bug) must not leak what was taken.
	defer func() {
		if p := recover(); p != nil {
			d.held.release(false)
			panic(p)
		}
	}()
	if err := g.concurrencyAndBeyond(ctx, c, &d); err != nil || d.Status != 0 {
		d.held.release(false)
		return d, err
	}
	d.Allowed = true
	return d, nil
}

// concurrencyAndBeyond runs the layers that hold something while the
// request is served: the tenant's concurrency cap, the pool's shedder, a
// bulkhead seat and an adaptive permit. What a layer took is kept in d.held;
// the caller releases it when a later layer says no.
//
// Shedding runs before the bulkhead so that a shed request never queues.
// Shedding is per pool: a pool sheds when its own queue builds, lowest
// priority first, so one tier's flood never sheds another tier's requests.
//
// In a pool's fair queue a flow is a tenant's requests of one criticality,
// so a tenant's critical reads are not stuck behind its own queued exports.
func (g *Gate) concurrencyAndBeyond(ctx context.Context, c *compiled, d *Decision) error {
	t, r := d.Tenant, d.Route
	pool := r.Pool
	if pool == "" {
		pool = t.Pool
	}
	d.held.g = g
	// concurrency
	if t.MaxConcurrent > 0 {
		sp := g.layerSpan(ctx, SpanConcurrency)
		perInstance := (t.MaxConcurrent + g.instances - 1) / g.instances
		slot, ok := g.caps.TryAcquire(t.ID, perInstance)
		if sp.on() {
			sp.s.SetAttributes(attrMaxConcurrent.Int(perInstance), attrInFlight.Int(g.caps.InFlight(t.ID)))
		}
		if !ok {
			g.reject(d, LayerConcurrency, http.StatusTooManyRequests, "max_concurrent", g.holdHint(pool))
			sp.end(d, LayerConcurrency)
			return nil
		}
		d.held.slot = slot
		sp.end(d, LayerConcurrency)
	}
	// shed
	if ps := g.shedderFor(pool); ps != nil {
		sp := g.layerSpan(ctx, SpanShed)
		d.held.shed = ps
		g.observe(ps, pool)
		prio := d.Priority
		ok, retry := ps.shedder.Admit(prio)
		if sp.on() {
			sp.s.SetAttributes(attrPool.String(pool), attrPriority.Int(int(prio)), attrThreshold.Int(int(ps.shedder.Threshold())))
		}
		if !ok {
			g.reject(d, LayerShed, http.StatusServiceUnavailable, "priority", retry)
			sp.end(d, LayerShed)
			return nil
		}
		sp.end(d, LayerShed)
	}
	// bulkhead
	if g.pools != nil {
		sp := g.layerSpan(ctx, SpanBulkhead)
		defer sp.end(d, LayerBulkhead)
		flow := t.ID
		if f := c.flows[t]; f != nil && int(r.Criticality) < len(f) {
			flow = f[r.Criticality]
		}
		seat, err := g.pools.Acquire(ctx, pool, flow, int(r.Cost))
		if sp.on() {
			sp.s.SetAttributes(attrPool.String(pool), attrQueueWait.Float64(float64(seat.Waited())/1e6), attrBorrowed.Bool(err == nil && seat.Borrowed()))
		}
		switch {
		case err == nil:
			d.held.seat = seat
			if g.metrics != nil {
				g.metrics.queueWait.WithLabelValues(pool).Observe(seat.Waited().Seconds())
			}
		case errors.Is(err, bulkhead.ErrQueueFull):
			g.reject(d, LayerBulkhead, http.StatusServiceUnavailable, "queue_full", g.retryHint(pool))
			return nil
		case errors.Is(err, bulkhead.ErrWaitTimeout):
			g.reject(d, LayerBulkhead, http.StatusServiceUnavailable, "wait_timeout", g.retryHint(pool))
			return nil
		case errors.Is(err, context.DeadlineExceeded):
			// The request's own deadline ended its wait: the client is
			// still there (an embedding handler set the deadline), so it
			// gets the bulkhead's answer, not a silent 499.
			g.reject(d, LayerBulkhead, http.StatusServiceUnavailable, "wait_timeout", g.retryHint(pool))
			return nil
		case errors.Is(err, bulkhead.ErrDraining):
			g.reject(d, LayerBulkhead, http.StatusServiceUnavailable, "draining", time.Second)
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			return err
		}
	}
	// adaptive (deferred: taken by StartUpstream around the upstream call)
	if g.limiter != nil && !g.deferAdaptive {
		sp := g.layerSpan(ctx, SpanAdaptive)
		p, ok := g.limiter.TryAcquire()
		if sp.on() {
			sp.s.SetAttributes(attrLimitCurrent.Int(g.limiter.Limit()), attrLimitInFlight.Int(g.limiter.Inflight()))
		}
		// With pools, the pools enforce the learned total (their seats
		// follow it) and a request that won a seat fairly is never turned
		// away here: without a permit it just teaches the limit nothing.
		// Without pools the limiter itself is the gate.
		if !ok && g.pools == nil {
			g.reject(d, LayerAdaptive, http.StatusServiceUnavailable, "limit_reached", time.Second)
			sp.end(d, LayerAdaptive)
			return nil
		}
		d.held.permit = p
		sp.end(d, LayerAdaptive)
	}
	return nil
}

func (g *Gate) shedderFor(pool string) *poolShed {
	if g.shedders == nil {
		return nil
	}
	if g.pools == nil {
		return g.shedders[""]
	}
	return g.shedders[pool]
}

// observe tells a pool's shedder the pressure on the pool, at most twenty
// times a calibration interval, from whichever request comes first.
func (g *Gate) observe(ps *poolShed, pool string) {
	now := g.now()
	next := ps.nextObserve.Load()
	if now.UnixNano() < next || !ps.nextObserve.CompareAndSwap(next, now.UnixNano()+ps.every) {
		return
	}
	p := shed.Pressure{QueueCap: ps.queueCap, Completed: ps.completed.Load()}
	if g.pools != nil {
		st, _ := g.pools.Stats(pool)
		p.Queued, p.Inflight = st.Queued, st.InFlight
		p.Limit = max(1, st.Seats-st.Lent+st.Borrowed)
	} else {
		p.Inflight, p.Limit = g.limiter.Inflight(), g.limiter.Limit()
	}
	ps.shedder.Observe(now, p)
}

// retryHint is the Retry-After of a bulkhead rejection: the pool's own
// estimate of when a seat frees up.
func (g *Gate) retryHint(pool string) time.Duration {
	if st, ok := g.pools.Stats(pool); ok && st.RetryAfter > 0 {
		return st.RetryAfter
	}
	return time.Second
}

// holdHint is the Retry-After of a concurrency rejection: how long a request
// of the pool holds its seat on average (one of the tenant's requests in
// flight will likely have finished by then).
func (g *Gate) holdHint(pool string) time.Duration {
	if g.pools != nil {
		if st, ok := g.pools.Stats(pool); ok && st.MeanHold > 0 {
			return st.MeanHold
		}
	}
	return time.Second
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
			l := ratelimit.Limit{Rate: q.Rate, Burst: q.Burst}
			res, err := g.take(ctx, ratelimit.BucketKey{Tenant: t.ID, Scope: r.Group}, l, r.Cost)
			if err != nil {
				return g.storeFailed(ctx, d, err)
			}
			d.Quotas[1] = quotaState(r.Group, l, res)
			d.NQuotas = 2
			if !res.Allowed {
				g.reject(d, LayerRate, http.StatusTooManyRequests, "group_quota", res.RetryAfter)
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
		g.reject(d, LayerRate, http.StatusTooManyRequests, "tenant_quota", res.RetryAfter)
		return nil
	}
	if c.global != nil {
		res, err := g.take(ctx, ratelimit.BucketKey{}, *c.global, r.Cost)
		if err != nil {
			return g.storeFailed(ctx, d, err)
		}
		if !res.Allowed {
			g.reject(d, LayerRate, http.StatusServiceUnavailable, "global_backstop", res.RetryAfter)
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
// the caller is returned as it is; any other store error means the store's
// own failure policy chose to fail closed, so the request gets a 503.
func (g *Gate) storeFailed(ctx context.Context, d *Decision, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	retry := time.Second
	var h interface{ RetryAfterHint() time.Duration }
	if errors.As(err, &h) && h.RetryAfterHint() > 0 {
		retry = h.RetryAfterHint()
	}
	g.reject(d, LayerRate, http.StatusServiceUnavailable, "store_unavailable", retry)
	if g.metrics != nil {
		g.metrics.storeErrs.WithLabelValues("fail_closed").Inc()
	}
	return nil
}

func (g *Gate) rejectUnauthenticated(c *compiled, req Request, presented bool) Decision {
	d := Decision{Route: c.routes.unmatched}
	ip := unauthKey(req.RemoteAddr)
	res := g.unauth.TakeAt(g.now().UnixNano(), ratelimit.BucketKey{Tenant: ip, Scope: "unauthenticated"}, c.unauth, 1)
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

func quotaState(name string, l ratelimit.Limit, r ratelimit.Result) QuotaState {
	return QuotaState{Name: name, Limit: l.Burst, Window: l.Window(), Remaining: r.Remaining, Reset: r.ResetAfter}
}

// clientIP returns the host part of a "host:port" peer address.
// unauthKey is the key of a failed-authentication bucket: the client's
// IPv4 address, or its IPv6 /64 (one host usually has a whole /64 to rotate
// through).
func unauthKey(remote string) string {
	ip := clientIP(remote)
	a, err := netip.ParseAddr(ip)
	if err != nil || a.Unmap().Is4() {
		return ip
	}
	p, _ := a.Prefix(64)
	return p.String()
}

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

// held is what a request took from the layers that hold something while it
// is served. The zero value holds nothing; releasing twice is harmless.
type held struct {
	g      *Gate
	slot   bulkhead.Slot
	seat   bulkhead.Seat
	permit shed.Permit
	shed   *poolShed
	// answered is set by UpstreamAnswered: the permit is released and
	// the completion counted already.
	answered bool
}

// release gives everything back, last taken first. ok says the upstream
// answered: its latency teaches the adaptive limit, and the pool's shedder
// counts a completion. Otherwise the permit is dropped without learning.
// With a deferred adaptive layer (Options.DeferAdaptive) only
// UpstreamAnswered teaches and counts: release then just gives back.
func (h *held) release(ok bool) {
	if h.g == nil {
		return
	}
	if !h.answered {
		if ok && !h.g.deferAdaptive {
			h.permit.Record()
			if h.shed != nil {
				h.shed.completed.Add(1)
			}
		} else {
			h.permit.Drop()
		}
	}
	h.seat.Release()
	h.slot.Release()
	*h = held{}
}

// StartUpstream takes the adaptive permit just before the upstream call,
// for a gate built with Options.DeferAdaptive (the gateway does this, so
// that the limit learns the upstream's latency and not the time a client
// takes to send its body or read the answer). With bulkhead pools it
// always reports true (the pools enforce the learned total; a request
// without a permit just teaches nothing). Without pools, false means the
// adaptive limit is reached: answer 503 with layer "adaptive" and call Done.
func (d *Decision) StartUpstream() bool {
	g := d.held.g
	if g == nil || g.limiter == nil || !g.deferAdaptive {
		return true
	}
	p, ok := g.limiter.TryAcquire()
	if !ok && g.pools == nil {
		return false
	}
	d.held.permit = p
	return true
}

// UpstreamAnswered tells the gate the upstream's response headers arrived:
// the adaptive limit learns the call's latency now and the pool counts a
// completion, whatever happens to the response body afterwards. Done still
// releases the seat and slot.
func (d *Decision) UpstreamAnswered() {
	h := &d.held
	if h.g == nil || h.answered {
		return
	}
	h.answered = true
	h.permit.Record()
	if h.shed != nil {
		h.shed.completed.Add(1)
	}
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
	// InFlight is the tenant's requests in flight on this instance.
	InFlight int `json:"in_flight"`
	// Pool is the tenant's bulkhead pool and its state, when pools are
	// configured.
	Pool      string              `json:"pool,omitempty"`
	PoolStats *bulkhead.PoolStats `json:"pool_stats,omitempty"`
}

// TenantState returns the state of the tenant with the given ID.
func (g *Gate) TenantState(id string) (TenantState, bool) {
	t, ok := g.cfg.Load().reg.ByID(id)
	if !ok {
		return TenantState{}, false
	}
	st := TenantState{ID: t.ID, Tier: t.Tier, Rate: t.Rate, Burst: t.Burst, MaxConcurrent: t.MaxConcurrent,
		InFlight: g.caps.InFlight(t.ID)}
	if g.pools != nil {
		if ps, ok := g.pools.Stats(t.Pool); ok {
			st.Pool, st.PoolStats = t.Pool, &ps
		}
	}
	if p, ok := g.store.(interface {
		Tokens(ratelimit.BucketKey, ratelimit.Limit) float64
	}); ok {
		tok := p.Tokens(ratelimit.BucketKey{Tenant: t.ID}, ratelimit.Limit{Rate: t.Rate, Burst: t.Burst})
		st.Tokens = &tok
	}
	return st, true
}

// Drain is for graceful shutdown: requests waiting in the bulkhead queues
// get a 503 (reason "draining") at once, and so does every later request
// that finds no free seat; requests holding seats finish normally.
func (g *Gate) Drain() {
	if g.pools != nil {
		g.pools.Drain()
	}
}

// UnauthenticatedBuckets returns how many per-IP buckets of failed
// authentication attempts the gate holds (a flood of random keys adds none
// per key).
func (g *Gate) UnauthenticatedBuckets() int { return g.unauth.Len() }
