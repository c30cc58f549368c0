package admission

import (
	"context"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// Span names and attribute keys of the observability contract (DESIGN.md).
// The root span, SpanRequest, is started by the HTTP edge; the gate adds a
// child per layer that ran and annotates the root with the decision.
const (
	SpanRequest     = "fairgate.request"
	SpanIdentify    = "admission.identify"
	SpanRate        = "admission.rate"
	SpanConcurrency = "admission.concurrency"
	SpanShed        = "admission.shed"
	SpanBulkhead    = "admission.bulkhead"
	SpanAdaptive    = "admission.adaptive"
	SpanUpstream    = "proxy.upstream"

	AttrTenantID   = attribute.Key("tenant.id")
	AttrTenantTier = attribute.Key("tenant.tier")
	AttrRoute      = attribute.Key("route")
	AttrDecision   = attribute.Key(ratelimit.DecisionAttr)  // "admit" or "reject"
	AttrRejectedBy = attribute.Key("admission.rejected_by") // the layer
	AttrReason     = attribute.Key("admission.reason")      // the layer's word
	AttrRetryAfter = attribute.Key("admission.retry_after_s")
	AttrStatusCode = attribute.Key("http.response.status_code")
	AttrRequestID  = attribute.Key("fairgate.request_id")
	// AttrShadowReject is true, on the root and the admission.rate span,
	// when shadow mode admitted a request the rate quotas refused (the
	// rate span's ratelimit.bucket says which).
	AttrShadowReject = attribute.Key("ratelimit.shadow_reject")
	// AttrExempt is true, on the root span, when the request passed the
	// shared layers as exempt.
	AttrExempt = attribute.Key("admission.exempt")

	attrAuth      = attribute.Key("auth.result") // "ok", "missing_key", "unknown_key", "too_many_failed_attempts"
	attrCost      = attribute.Key("route.cost")
	attrRemaining = attribute.Key("ratelimit.remaining")
	attrLimit     = attribute.Key("ratelimit.limit")
	attrBucket    = attribute.Key("ratelimit.bucket") // the bucket that decided
	// The global backstop: its tokens after the take (negative while
	// tenants within their shares use its reserve), the tenant's recent
	// use of it and its fair share, in tokens a second.
	attrBackstopTokens = attribute.Key("backstop.tokens")
	attrBackstopUse    = attribute.Key("backstop.use")
	attrBackstopShare  = attribute.Key("backstop.share")
	attrBackstopWithin = attribute.Key("backstop.within_share")
	attrPolicy         = attribute.Key("ratelimit.failure_policy")
	attrStoreMs        = attribute.Key("ratelimit.store_ms")
	attrMaxConcurrent  = attribute.Key("concurrency.max")
	attrInFlight       = attribute.Key("concurrency.in_flight")
	attrPool           = attribute.Key("bulkhead.pool")
	attrQueueWait      = attribute.Key("queue.wait_ms")
	attrBorrowed       = attribute.Key("bulkhead.borrowed")
	attrPriority       = attribute.Key("shed.priority")
	attrThreshold      = attribute.Key("shed.threshold")
	// shed.floor: the priority below which every pool sheds while the
	// upstream is the bottleneck. share.*: the tenant's use of the pool
	// (average requests held or queued), its fair share, and whether it is
	// within it (then it is never shed).
	attrShedFloor     = attribute.Key("shed.floor")
	attrShareWithin   = attribute.Key("share.within")
	attrShareUse      = attribute.Key("share.use")
	attrShare         = attribute.Key("share.fair")
	attrLimitCurrent  = attribute.Key("limit.current")
	attrLimitInFlight = attribute.Key("limit.in_flight")
)

// Decision words of the admission.decision attribute and the outcome
// label.
const (
	OutcomeAdmit  = ratelimit.OutcomeAdmit
	OutcomeReject = ratelimit.OutcomeReject
	// OutcomeShadowReject (the outcome label only) is a request the rate
	// layer would have refused and admitted because shadow mode covers
	// it; its layer label is "rate".
	OutcomeShadowReject = "shadow_reject"
	// OutcomeExempt (the outcome label only) is a request admitted as
	// exempt (Decision.Exempt): it passed the shared layers.
	OutcomeExempt = "exempt"
)

// round3 rounds x to three decimals, so that span attributes read
// 19.999 rather than 19.999999999999996.
func round3(x float64) float64 {
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return x
	}
	return math.Round(x*1000) / 1000
}

// millis is d in milliseconds, to the microsecond.
func millis(d time.Duration) float64 { return round3(float64(d) / 1e6) }

// span is a layer span, or nothing when tracing is off: its methods are
// no-ops on the zero value, so the hot path pays one nil check per layer.
// Build attributes only after checking on(): a variadic call would
// allocate even when the span is off.
type span struct{ s trace.Span }

// layerSpan starts a child of ctx's span named name, when the gate has a
// tracer and ctx's span is recording (the edge sampled the request).
func (g *Gate) layerSpan(ctx context.Context, name string) span {
	if g.tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return span{}
	}
	_, s := g.tracer.Start(ctx, name)
	return span{s}
}

func (s span) on() bool { return s.s != nil }

// end ends the span; when layer rejected d, its status is Error with the
// reason.
func (s span) end(d *Decision, layer Layer) {
	s.endLayer(layer, d.Status != 0 && d.Layer == layer, d.Reason)
}

// endLayer ends the span of layer; when the layer rejected the request, its
// status is Error with the reason.
func (s span) endLayer(layer Layer, rejected bool, reason Reason) {
	if s.s == nil {
		return
	}
	if rejected {
		s.s.SetAttributes(AttrReason.String(reason.String()))
		s.s.SetStatus(codes.Error, layer.String()+": "+reason.String())
	}
	s.s.End()
}

// Annotate sets the decision's attributes on sp (the request's root span):
// tenant, tier, route, admit or reject, the layer and reason; a rejection
// sets the span's status to Error. It does nothing when sp is not
// recording.
func (d *Decision) Annotate(sp trace.Span) {
	if !sp.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 7)
	if d.Tenant != nil {
		attrs = append(attrs, AttrTenantID.String(d.Tenant.ID), AttrTenantTier.String(d.Tenant.Tier))
	}
	if d.Route != nil {
		attrs = append(attrs, AttrRoute.String(d.Route.Name))
	}
	if d.Allowed {
		if d.ShadowRejected != ReasonNone {
			attrs = append(attrs, AttrShadowReject.Bool(true))
		}
		if d.Exempt {
			attrs = append(attrs, AttrExempt.Bool(true))
		}
		sp.SetAttributes(append(attrs, AttrDecision.String(OutcomeAdmit))...)
		return
	}
	attrs = append(attrs, AttrDecision.String(OutcomeReject), AttrRejectedBy.String(d.Layer.String()),
		AttrReason.String(d.Reason.String()), AttrRetryAfter.Int64(ceilSeconds(d.RetryAfter, 0)))
	sp.SetAttributes(attrs...)
	sp.SetStatus(codes.Error, "rejected by "+d.Layer.String()+": "+d.Reason.String())
}

// Metrics are the gate's Prometheus metrics. Build them with NewMetrics on
// a registry the caller owns (never the global one) and pass them in
// Options.Metrics. A nil *Metrics records nothing. Safe for concurrent use.
//
// Labels are bounded: tenant is a configured tenant's ID (empty for
// requests without a valid key), route is a route template's name
// ("unmatched" for the rest), never a raw path or key.
type Metrics struct {
	reg       prometheus.Registerer
	decisions *prometheus.CounterVec
	rejects   *prometheus.CounterVec
	queueWait *prometheus.HistogramVec
	storeTake prometheus.Histogram
	storeErrs *prometheus.CounterVec

	// StorePolicy counts decisions a shared store made by its failure
	// policy ("fail_open", "fail_closed", "local") because of cause (a
	// bounded word: "timeout", "breaker_open", "error"). The Redis store's
	// Options.OnPolicy hook calls it.
	StorePolicy *prometheus.CounterVec
	// StoreBreaker is 1 for the store's circuit breaker's current state
	// ("closed", "half_open", "open") and 0 for the others. The Redis
	// store's Options.OnBreakerChange hook sets it (see SetBreakerState).
	StoreBreaker *prometheus.GaugeVec

	red    *red           // the RED families (red.go)
	settle *settleMetrics // settled routes' families (settlemetrics.go)

	storeOnce sync.Once // RegisterStore
	storeErr  error

	mu       sync.RWMutex
	counters map[decisionLabels]prometheus.Counter
	rejected map[rejectLabels]prometheus.Counter
}

type rejectLabels struct {
	layer  Layer
	reason Reason
	status int
}

type decisionLabels struct {
	tenant, tier, route string
	layer               Layer
	shadow              bool // admitted by shadow mode
	exempt              bool // admitted as exempt
}

// NewMetrics registers the gate's metrics on reg, with the default
// MetricsOptions.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	return NewMetricsWith(reg, MetricsOptions{})
}

// MetricsOptions are the choices of NewMetricsWith.
type MetricsOptions struct {
	// NativeHistograms makes the request and upstream duration
	// histograms native ones as well as classic (red.go).
	NativeHistograms bool
}

// NewMetricsWith registers the gate's metrics on reg, as o says.
func NewMetricsWith(reg prometheus.Registerer, o MetricsOptions) (*Metrics, error) {
	m := &Metrics{
		reg: reg,
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_decisions_total",
			Help: "Admission decisions by tenant, tier, route template, the layer that rejected (none when admitted; rate for shadow_reject) and outcome (admit, reject, shadow_reject: admitted by shadow mode, exempt: admitted past the shared layers).",
		}, []string{"tenant", "tier", "route", "layer", "outcome"}),
		rejects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_rejections_total",
			Help: "Rejections by layer, reason and HTTP status (401, 429 or 503): 503 means overload, 429 a tenant over its quota.",
		}, []string{"layer", "reason", "status"}),
		queueWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fairgate_queue_wait_seconds",
			Help:    "Time an admitted request waited in its bulkhead pool's queue.",
			Buckets: []float64{0, .001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"pool"}),
		storeTake: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fairgate_store_take_seconds",
			Help:    "Latency of one rate-store take (Redis or embedded), as the rate layer saw it.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1},
		}),
		storeErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_store_errors_total",
			Help: "Rate-store takes that failed closed (the request got a 503), by kind.",
		}, []string{"kind"}),
		StorePolicy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_store_policy_decisions_total",
			Help: "Decisions made by the shared store's failure policy while Redis could not answer.",
		}, []string{"policy", "cause"}),
		StoreBreaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fairgate_store_breaker_state",
			Help: "1 for the shared store's circuit breaker's current state (closed, half_open, open).",
		}, []string{"state"}),
		red:      newRED(o.NativeHistograms),
		settle:   newSettleMetrics(),
		counters: map[decisionLabels]prometheus.Counter{},
		rejected: map[rejectLabels]prometheus.Counter{},
	}
	// Series an alert takes rate() of exist from the start, at zero.
	m.storeErrs.WithLabelValues("fail_closed")
	for _, p := range [...]string{"local", "fail_open", "fail_closed"} {
		for _, c := range [...]string{"timeout", "breaker_open", "error"} {
			m.StorePolicy.WithLabelValues(p, c)
		}
	}
	for _, c := range append(append([]prometheus.Collector{m.decisions, m.rejects, m.queueWait}, m.red.collectors()...), m.settle.collectors()...) {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// RegisterStore registers the shared store's families (take latency,
// fail-closed errors, failure-policy decisions, breaker state) once, when
// a gate on a shared store is made (and by whoever else serves decisions
// of one, as the rate limit service alone does): on the embedded store they would be
// zeros that say nothing, and a dashboard would show a Redis that is not
// there.
func (m *Metrics) RegisterStore() error {
	m.storeOnce.Do(func() {
		for _, c := range []prometheus.Collector{m.storeTake, m.storeErrs, m.StorePolicy, m.StoreBreaker} {
			if m.storeErr = m.reg.Register(c); m.storeErr != nil {
				return
			}
		}
	})
	return m.storeErr
}

// SetBreakerState sets StoreBreaker to state ("closed", "half_open" or
// "open").
func (m *Metrics) SetBreakerState(state string) {
	for _, s := range [...]string{"closed", "half_open", "open"} {
		v := 0.0
		if s == state {
			v = 1
		}
		m.StoreBreaker.WithLabelValues(s).Set(v)
	}
}

// count adds d to the decisions counter. The counter of each label set is
// looked up once and cached, so a decision costs a map read, not the
// label hashing (and allocation) of WithLabelValues.
func (m *Metrics) count(d *Decision) {
	k := decisionLabels{route: d.Route.Name, layer: d.Layer}
	if d.Tenant != nil {
		k.tenant, k.tier = d.Tenant.ID, d.Tenant.Tier
	}
	if d.Allowed && d.ShadowRejected != ReasonNone {
		k.layer, k.shadow = LayerRate, true
	}
	k.exempt = d.Allowed && d.Exempt && !k.shadow
	m.mu.RLock()
	c := m.counters[k]
	m.mu.RUnlock()
	if c == nil {
		outcome := OutcomeAdmit
		switch {
		case k.shadow:
			outcome = OutcomeShadowReject
		case k.exempt:
			outcome = OutcomeExempt
		case !d.Allowed:
			outcome = OutcomeReject
		}
		c = m.decisions.WithLabelValues(k.tenant, k.tier, k.route, k.layer.String(), outcome)
		m.mu.Lock()
		m.counters[k] = c
		m.mu.Unlock()
	}
	c.Inc()
	if d.Allowed {
		return
	}
	rk := rejectLabels{layer: d.Layer, reason: d.Reason, status: d.Status}
	m.mu.RLock()
	c = m.rejected[rk]
	m.mu.RUnlock()
	if c == nil {
		c = m.rejects.WithLabelValues(d.Layer.String(), d.Reason.String(), strconv.Itoa(d.Status))
		m.mu.Lock()
		m.rejected[rk] = c
		m.mu.Unlock()
	}
	c.Inc()
}

// gateCollector reports the gate's gauges at scrape time, so the hot path
// pays nothing for them: per pool in-flight, queued and seats, each pool's
// shed threshold, the adaptive limit and its in-flight count.
type gateCollector struct {
	g                                   *Gate
	inFlight, queued, seats, thr, adLim *prometheus.Desc
	adInFlight, tenantsInFlightTracked  *prometheus.Desc
}

func newGateCollector(g *Gate) *gateCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &gateCollector{g: g,
		inFlight:               d("fairgate_pool_in_flight", "Requests holding a seat of the bulkhead pool (own or borrowed).", "pool"),
		queued:                 d("fairgate_pool_queued", "Requests waiting in the bulkhead pool's queue.", "pool"),
		seats:                  d("fairgate_pool_seats", "The pool's nominal seats: its share of the current total.", "pool"),
		thr:                    d("fairgate_shed_threshold", "The pool's shedding threshold: priorities below it are shed (0: nothing is).", "pool"),
		adLim:                  d("fairgate_adaptive_limit", "The adaptive concurrency limit learned from upstream latency."),
		adInFlight:             d("fairgate_adaptive_in_flight", "Requests holding an adaptive-limit permit."),
		tenantsInFlightTracked: d("fairgate_tenants_in_flight", "Tenants with requests in flight on this instance."),
	}
}

func (c *gateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.inFlight, c.queued, c.seats, c.thr, c.adLim, c.adInFlight, c.tenantsInFlightTracked} {
		ch <- d
	}
}

func (c *gateCollector) Collect(ch chan<- prometheus.Metric) {
	g := c.g
	gauge := func(d *prometheus.Desc, v int, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	if g.pools != nil {
		for _, name := range g.pools.Names() {
			st, ok := g.pools.Stats(name)
			if !ok {
				continue
			}
			gauge(c.inFlight, st.InFlight, name)
			gauge(c.queued, st.Queued, name)
			gauge(c.seats, st.Seats, name)
		}
	}
	for name, ps := range g.shedders {
		gauge(c.thr, int(ps.shedder.Threshold()), name)
	}
	if g.limiter != nil {
		gauge(c.adLim, g.limiter.Limit())
		gauge(c.adInFlight, g.limiter.Inflight())
	}
	gauge(c.tenantsInFlightTracked, g.caps.Tenants())
}
