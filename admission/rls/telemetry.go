package rls

import (
	"github.com/fairgate/fairgate/admission/ratelimit"

	"context"
	"log/slog"
	"sync"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// SpanRLS is the span of one ShouldRateLimit call. It is the local root
// (a child of Envoy's span when Envoy propagates W3C trace context).
const SpanRLS = "admission.rls"

// attrDecision is the span attribute of the outcome, the pipeline's own
// (admission.AttrDecision), so one query finds both.
const attrDecision = attribute.Key(ratelimit.DecisionAttr)

// Span attributes of SpanRLS, beside admission.decision.
const (
	AttrDomain       = attribute.Key("rls.domain")        // configured domain, or "unknown"
	AttrDescriptor   = attribute.Key("rls.descriptor")    // configured path of the descriptor that decided
	AttrOutcome      = attribute.Key("rls.outcome")       // that descriptor's outcome (admit, reject, shadow_reject, …)
	AttrDescriptors  = attribute.Key("rls.descriptors")   // descriptors in the request
	AttrShadowReject = attribute.Key("rls.shadow_reject") // true when a shadow descriptor would have rejected
	attrRemaining    = attribute.Key("ratelimit.remaining")
	attrLimit        = attribute.Key("ratelimit.limit")
)

// DefaultShadowLogEvery is the least time between two log lines about one
// descriptor's shadow rejections.
const DefaultShadowLogEvery = ratelimit.DefaultShadowLogEvery

// Telemetry records the service's spans and metrics. Build it with
// NewTelemetry; a nil *Telemetry records nothing. Safe for concurrent use.
//
// Labels are bounded by the config: domain is a configured domain
// ("unknown" for the rest), descriptor a configured descriptor path
// ("none" when no configured descriptor matched), never a request's
// values.
type Telemetry struct {
	tracer    trace.Tracer // nil: no spans
	prop      propagation.TextMapPropagator
	decisions *prometheus.CounterVec // nil: no metrics
	near      *prometheus.CounterVec
	calls     *prometheus.HistogramVec
	log       *slog.Logger
	logEvery  time.Duration
	now       func() time.Time

	mu         sync.Mutex
	lastShadow map[string]time.Time // guarded by mu: descriptor → last shadow log line
}

// TelemetryOptions configures NewTelemetry. The zero value records
// nothing.
type TelemetryOptions struct {
	// TracerProvider makes the admission.rls spans. Nil means none.
	TracerProvider trace.TracerProvider
	// Metrics is the registry the metrics are registered on. Nil means
	// none.
	Metrics prometheus.Registerer
	// Logger receives shadow rejections, at most one line per
	// ShadowLogEvery per descriptor. Nil means no log lines.
	Logger *slog.Logger
	// ShadowLogEvery: zero means DefaultShadowLogEvery.
	ShadowLogEvery time.Duration
	// Now is the clock that spaces the shadow log lines. Nil means
	// time.Now. (Call latency is always measured in real time.)
	Now func() time.Time
}

// NewTelemetry registers the service's metrics on o.Metrics.
func NewTelemetry(o TelemetryOptions) (*Telemetry, error) {
	t := &Telemetry{prop: propagation.TraceContext{}, log: o.Logger, logEvery: o.ShadowLogEvery, now: o.Now, lastShadow: make(map[string]time.Time)}
	if t.logEvery <= 0 {
		t.logEvery = DefaultShadowLogEvery
	}
	if t.now == nil {
		t.now = time.Now
	}
	if o.TracerProvider != nil {
		t.tracer = o.TracerProvider.Tracer("github.com/fairgate/fairgate/admission/rls")
	}
	if o.Metrics != nil {
		t.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_rls_decisions_total",
			Help: "Envoy rate limit service decisions, one per request descriptor, by domain, configured descriptor and outcome (admit, reject, shadow_reject, quota_over, unlimited, no_limit, not_charged, settled).",
		}, []string{"domain", "descriptor", "outcome"})
		t.near = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_rls_near_limit_total",
			Help: "Admitted descriptor decisions that left their bucket near the limit (more tokens used than rls.near_limit_ratio × requests_per_unit, rounded down: envoyproxy/ratelimit's near_limit), by domain and configured descriptor.",
		}, []string{"domain", "descriptor"})
		t.calls = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fairgate_rls_call_seconds",
			Help:    "ShouldRateLimit calls by gRPC code and overall code (OK, OVER_LIMIT; empty on error), and their latency.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .1},
		}, []string{"grpc_code", "overall_code"})
		for _, c := range []prometheus.Collector{t.decisions, t.near, t.calls} {
			if err := o.Metrics.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return t, nil
}

// orNop returns t, or a Telemetry that records nothing but still logs to
// log when t is nil.
func (t *Telemetry) orNop(log *slog.Logger) *Telemetry {
	if t != nil {
		return t
	}
	t, _ = NewTelemetry(TelemetryOptions{Logger: log}) // no registry: cannot fail
	return t
}

// call is one ShouldRateLimit call being recorded.
type call struct {
	t      *Telemetry
	span   trace.Span // nil when not tracing
	start  time.Time
	domain string
	known  bool
}

// start begins recording a call to domain.
func (t *Telemetry) start(ctx context.Context, domain string, known bool) call {
	c := call{t: t, domain: domain, known: known}
	if t.calls != nil {
		c.start = time.Now()
	}
	if t.tracer != nil {
		if md, ok := metadata.FromIncomingContext(ctx); ok {
			ctx = t.prop.Extract(ctx, mdCarrier(md))
		}
		_, c.span = t.tracer.Start(ctx, SpanRLS, trace.WithSpanKind(trace.SpanKindServer))
	}
	return c
}

// domainLabel is the bounded domain label.
func (c *call) domainLabel() string {
	if c.known {
		return c.domain
	}
	return "unknown"
}

// verdict counts one descriptor's decision and logs a shadow rejection.
func (c *call) verdict(v *verdict) {
	t := c.t
	path := "none"
	if v.node != nil {
		path = v.node.path
	} else if v.rule != nil {
		path = v.rule.name
	}
	if t.decisions != nil {
		t.decisions.WithLabelValues(c.domainLabel(), path, v.outcome).Inc()
		if v.near {
			t.near.WithLabelValues(c.domainLabel(), path).Inc()
		}
	}
	if v.outcome == OutcomeShadowReject && t.log != nil {
		key := c.domain + "\x00" + path
		now := t.now()
		t.mu.Lock()
		ok := now.Sub(t.lastShadow[key]) >= t.logEvery
		if ok {
			t.lastShadow[key] = now
		}
		t.mu.Unlock()
		if ok {
			t.log.Info("rls shadow mode: would have rejected", "domain", c.domain, "descriptor", path,
				"limit", v.rule.requestsPerUnit, "unit", v.rule.unit.String(), "retry_after", v.res.RetryAfter.String())
		}
	}
}

// end records the call's outcome.
func (c *call) end(resp *rlsv3.RateLimitResponse, decider *verdict, vs []verdict, err error) {
	t := c.t
	overall := ""
	if resp != nil {
		overall = resp.OverallCode.String()
	}
	if t.calls != nil {
		t.calls.WithLabelValues(status.Code(err).String(), overall).Observe(time.Since(c.start).Seconds())
	}
	if c.span == nil {
		return
	}
	sp := c.span
	defer sp.End()
	attrs := []attribute.KeyValue{AttrDomain.String(c.domainLabel()), AttrDescriptors.Int(len(vs))}
	if decider != nil {
		path := "none"
		if decider.node != nil {
			path = decider.node.path
		}
		attrs = append(attrs, AttrDescriptor.String(path), AttrOutcome.String(decider.outcome))
		if decider.rule != nil {
			attrs = append(attrs, attrRemaining.Float64(decider.res.Remaining), attrLimit.Int64(int64(decider.rule.requestsPerUnit)))
		}
		if decider.outcome == OutcomeShadowReject {
			attrs = append(attrs, AttrShadowReject.Bool(true))
		}
	}
	switch {
	case err != nil:
		sp.SetAttributes(attrs...)
		sp.SetStatus(otelcodes.Error, err.Error())
	case resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT:
		sp.SetAttributes(append(attrs, attrDecision.String(ratelimit.OutcomeReject))...)
		sp.SetStatus(otelcodes.Error, "over limit: "+decider.rule.name)
	default:
		sp.SetAttributes(append(attrs, attrDecision.String(ratelimit.OutcomeAdmit))...)
	}
}

// mdCarrier reads W3C trace context from gRPC metadata.
type mdCarrier metadata.MD

func (m mdCarrier) Get(k string) string {
	if v := metadata.MD(m).Get(k); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (m mdCarrier) Set(k, v string) { metadata.MD(m).Set(k, v) }
func (m mdCarrier) Keys() []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
