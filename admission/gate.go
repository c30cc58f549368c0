package admission

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
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
	// TracerProvider makes the layer spans (admission.identify, …) as
	// children of the span in the request's context, when that span is
	// recording. Nil means no layer spans.
	TracerProvider trace.TracerProvider
	// Metrics records decisions, queue waits and store latency, and
	// reports the gate's gauges (pool occupancy, shed thresholds, the
	// adaptive limit) to the registry they were built on. Nil means none.
	Metrics *Metrics
	// ShadowLogEvery is the least time between two log lines about one
	// tenant's requests that shadow mode admitted. Zero means
	// DefaultShadowLogEvery.
	ShadowLogEvery time.Duration
	// RecentRejections is how many of the latest rejections the gate keeps
	// for the console (GET /admin/rejections), watched or not: about 200
	// bytes each. Zero means DefaultRecentRejections; at most
	// MaxRecentRejections.
	RecentRejections int
}

// DefaultShadowLogEvery is the least time between two log lines about one
// tenant's (or, in the rate limit service, one descriptor's) shadow
// rejections when the options set none.
const DefaultShadowLogEvery = ratelimit.DefaultShadowLogEvery

// Gate is the admission pipeline. It is safe for concurrent use, and its
// configuration can be replaced at run time with Reload while requests are
// being decided.
type Gate struct {
	cfg      atomic.Pointer[compiled]
	store    ratelimit.Store
	backstop ratelimit.BackstopStore // the store, when it keeps a backstop
	// timeTakes: the store's takes are timed (fairgate_store_take_seconds);
	// not the embedded store's, which take well under a microsecond: two
	// clock reads per request would cost more than what they measure.
	timeTakes bool
	unauth    *ratelimit.MemoryStore
	now       func() time.Time
	epoch     time.Time // instant 0 of the gate's in-process intervals
	// realClock: now is time.Now (Options.Now was nil), so elapsed may
	// read the monotonic clock alone.
	realClock bool
	log       *slog.Logger
	// fleet is the store, when several instances share it: concurrency
	// caps are kept per instance, so each instance enforces
	// ceil(max_concurrent / fleet.Instances()).
	fleet   ratelimit.FleetStore
	tracer  trace.Tracer // nil: no layer spans
	metrics *Metrics     // nil: no metrics

	// The later layers keep state across reloads; nil means off.
	caps     *bulkhead.Caps
	pools    *bulkhead.Pools
	limiter  *shed.Limiter
	shedders map[string]*poolShed // by pool name; "" when there are no pools
	// shedFloor is the priority below which every pool sheds while the
	// upstream is the bottleneck, floorRetry the Retry-After it gives
	// (ns); see updateShedFloor.
	shedFloor  atomic.Int32
	floorRetry atomic.Int64
	rules      gateRule         // rules.go; allGateRules but in negative controls
	reserve    *criticalReserve // without pools, with shedding: reserve.go
	// fair shares the adaptive limit by tenant without pools: one pool of
	// the limit's size and no queue (fairLimit in adaptive.go).
	fair     *bulkhead.Pools
	reloadMu sync.Mutex
	layerCfg layerConfig // what built the layers; guarded by reloadMu

	// What the console shows (admin.go): each tenant's rejections by
	// layer and each pool's waits over the last minute, and the recent
	// rejections.
	rejections counterSet
	waits      counterSet
	recent     *recentRejections

	// settleNonce and settleSeq name settlements (settleID).
	settleNonce string
	settleSeq   atomic.Uint64

	shadowLogEvery time.Duration
	shadowMu       sync.Mutex
	shadowLast     map[string]time.Time // guarded by shadowMu: tenant ID → its last shadow log line
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
	given := o.Now // nil: the real clock, which the embedded stores read monotonic alone
	realClock := given == nil
	if realClock {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Store == nil {
		o.Store = ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{Now: given})
	}
	if o.ShadowLogEvery <= 0 {
		o.ShadowLogEvery = DefaultShadowLogEvery
	}
	g := &Gate{store: o.Store, now: o.Now, epoch: o.Now(), log: o.Logger,
		unauth: ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{Now: given}), caps: bulkhead.NewCaps(),
		shadowLogEvery: o.ShadowLogEvery, shadowLast: make(map[string]time.Time), rules: allGateRules,
		recent: newRecentRejections(o.RecentRejections), realClock: realClock, settleNonce: rand.Text()[:13] + "-"}
	g.backstop, _ = o.Store.(ratelimit.BackstopStore)
	g.fleet, _ = o.Store.(ratelimit.FleetStore)
	_, embedded := o.Store.(*ratelimit.MemoryStore)
	g.timeTakes = o.Metrics != nil && !embedded
	if err := g.checkStore(c); err != nil {
		return nil, err
	}
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
		if !embedded {
			if err := o.Metrics.RegisterStore(); err != nil {
				return nil, fmt.Errorf("admission: register metrics: %w", err)
			}
		}
		g.metrics = o.Metrics
	}
	g.cfg.Store(c)
	return g, nil
}

// elapsed returns the time since the gate's epoch on its clock: on the
// real clock the monotonic reading alone (time.Since reads one clock,
// time.Now two), for what times a request rather than dates it.
func (g *Gate) elapsed() time.Duration {
	if g.realClock {
		return time.Since(g.epoch)
	}
	return g.now().Sub(g.epoch)
}

// checkStore reports a config the store cannot serve.
func (g *Gate) checkStore(c *compiled) error {
	if c.global != nil && g.backstop == nil {
		return fmt.Errorf("global: the store (%T) keeps no fair global backstop", g.store)
	}
	if _, ok := g.store.(ratelimit.MultiStore); !ok && c.reg != nil {
		tiers := c.reg.Tiers()
		for _, name := range slices.Sorted(maps.Keys(tiers)) {
			if tc := tiers[name]; len(tc.Limits) > 0 {
				return fmt.Errorf("tiers.%s.limits: the store (%T) cannot take several buckets at once", tenant.PathKey(name), g.store)
			}
		}
		var ids []string
		for _, t := range c.reg.Tenants() {
			if len(t.Limits) > 0 {
				ids = append(ids, t.ID)
			}
		}
		if len(ids) > 0 {
			return fmt.Errorf("tenant %s's limits: the store (%T) cannot take several buckets at once", slices.Min(ids), g.store)
		}
	}
	return nil
}

// Registry returns the tenant registry in force.
func (g *Gate) Registry() *tenant.Registry { return g.cfg.Load().reg }

// Request is what the pipeline needs to know of an HTTP request.
type Request struct {
	Method string
	// Path is the URL path, unescaped as net/http gives it.
	Path string
	// RawPath is the path as the client escaped it (URL.RawPath), when
	// that differs from the default escaping of Path; empty otherwise.
	// It tells an escaped '/' ("%2F") from a real one.
	RawPath string
	Header  http.Header
	// RemoteAddr is the peer's address ("ip:port"), used only to limit
	// unauthenticated attempts.
	RemoteAddr string
	// Priority, when HasPriority, replaces the priority the tier and
	// route would give (a trusted internal caller's X-Fairgate-Priority;
	// see Config.TrustedPriorityFrom). The middleware sets it; nothing
	// else should.
	Priority    shed.Priority
	HasPriority bool
	// BodyUnread says the request announced a body that the stack has
	// not read (ReadBody reads it, once the cheap layers have admitted
	// the request): a rejection then closes the connection after its
	// answer (Gate.Admit).
	BodyUnread bool
	// ReadBody, when set, is called once the cheap layers (identify, rate,
	// concurrency, shed) have admitted the request and before it waits for
	// a bulkhead seat. A proxy reads the body there (ProxyMiddleware does):
	// net/http notices a client's disconnect only once the body is read,
	// so a client that goes away while queued is then noticed and never
	// proxied, and no seat waits for a slow body. An error rejects the
	// request: *http.MaxBytesError is 413 body_too_large, a cancelled
	// context is returned as it is, anything else is 400 malformed_body.
	ReadBody func() error

	// bodyOf, when ReadBody is nil, is the request whose body is read
	// there (bufferBody): the middleware's way of asking for it without a
	// closure per request.
	bodyOf *http.Request
}

// Check runs the pipeline for one request. It returns the decision; the
// error is for faults only (a cancelled context). When the decision is
// allowed, the request holds a lease (Decision.Lease): call its
// StartUpstream just before the upstream call (the adaptive layer runs
// there), Answered when the upstream answered, and Release once the
// request is done.
func (g *Gate) Check(ctx context.Context, req Request) (Decision, error) {
	d, err := g.check(ctx, req)
	if err == nil {
		g.record(ctx, &d, "")
	}
	return d, err
}

// check runs the layers in order, cheapest first, and stops at the first
// that says no. The layers from the concurrency cap on hold something
// while the request is served (d.lease); when a later layer says no, or
// panics (a bug), what the earlier ones took is given back here.
func (g *Gate) check(ctx context.Context, req Request) (d Decision, err error) {
	c := g.cfg.Load()
	if req.RawPath != "" && hasEncodedSlash(req.RawPath) && c.slashes == RefuseEncodedSlashes {
		d.Route = c.routes.unmatched
		d.reject(ReasonEncodedSlash, 0)
		return d, nil
	}
	d.Route = c.routes.lookup(req.Method, req.Path, req.RawPath)
	defer func() {
		if p := recover(); p != nil {
			d.lease.Release()
			panic(p)
		}
		if !d.Allowed {
			d.lease.Release()
		}
	}()
	if d.Route.Anonymous {
		// auth: none: no tenant, so none of the tenant's layers; the
		// per-IP bucket, then the adaptive limit at StartUpstream.
		if g.rateAnonymous(c, req, &d); d.Status != 0 {
			return d, nil
		}
		if err := readBody(ctx, req, &d); err != nil || d.Status != 0 {
			return d, err
		}
		d.Exempt = d.Route.Exempt
		d.lease.g, d.lease.route, d.lease.critical, d.lease.exempt = g, d.Route, d.Route.Criticality == shed.Critical, d.Exempt
		g.setFairRequest(&d)
		d.Allowed = true
		return d, nil
	}
	if g.identify(ctx, c, req, &d); d.Status != 0 {
		return d, nil
	}
	d.Exempt = d.Route.Exempt || d.Tenant.Exempt
	if err := g.rate(ctx, c, &d); err != nil || d.Status != 0 {
		return d, err
	}
	d.lease.g, d.lease.route, d.lease.critical, d.lease.exempt = g, d.Route, d.Route.Criticality == shed.Critical, d.Exempt
	if g.admitConcurrency(ctx, &d); d.Status != 0 {
		return d, nil
	}
	if !d.Exempt {
		if g.admitShed(ctx, &d); d.Status != 0 {
			return d, nil
		}
	}
	if err := readBody(ctx, req, &d); err != nil || d.Status != 0 {
		return d, err
	}
	if !d.Exempt {
		if err := g.admitBulkhead(ctx, c, &d); err != nil || d.Status != 0 {
			return d, err
		}
	}
	// The adaptive layer guards the upstream call itself: the lease runs
	// it (Lease.StartUpstream).
	g.setFairRequest(&d)
	d.Allowed = true
	return d, nil
}

// setFairRequest tells d's lease how the adaptive limit's fair share sees
// it, when the limit is shared by tenant (Gate.fairLimit). Anonymous
// requests share it as one tenant.
func (g *Gate) setFairRequest(d *Decision) {
	if !g.fairLimit() {
		return
	}
	r := bulkhead.Request{Cost: int(d.cost()), Class: d.Route.class, Priority: int(d.Priority),
		Critical: d.Route.Criticality == shed.Critical, Arrived: d.arrived}
	if d.Tenant != nil {
		r.Tenant, r.Weight = d.Tenant.ID, d.Tenant.Weight
	}
	d.lease.fairRequest = r
}

// pool is the bulkhead pool (and shedder) that serves d: the route's, or
// else the tenant's.
func (d *Decision) pool() string {
	if d.Route.Pool != "" {
		return d.Route.Pool
	}
	return d.Tenant.Pool
}

// reject makes d a rejection for reason r: the status and layer come from
// the client contract's row for r.
func (d *Decision) reject(r Reason, retry time.Duration) {
	d.Allowed = false
	d.Reason = r
	d.Layer = r.Layer()
	d.Status = r.Status()
	d.RetryAfter = retry
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

// instances returns how many gateway instances share the store now.
func (g *Gate) instances() int {
	if g.fleet == nil {
		return 1
	}
	return max(1, g.fleet.Instances())
}
