package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairgate/fairgate/admission"
	"github.com/fairgate/fairgate/admission/redisstore"
	"github.com/fairgate/fairgate/internal/tailsample"
)

// HeaderTraceID is the response header that carries the request's trace ID
// (32 hex digits), for a support ticket to quote; Jaeger finds the trace by
// it. Set only when tracing is on.
const HeaderTraceID = "X-Trace-Id"

// TracingConfig is the file's tracing section. Without it (and without
// OTEL_EXPORTER_OTLP_ENDPOINT in the environment) tracing is off.
type TracingConfig struct {
	// Endpoint is the OTLP receiver's base URL, as in
	// OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:4318" for HTTP (the
	// exporter adds /v1/traces), "http://127.0.0.1:4317" for gRPC. The
	// scheme http means no TLS. Empty means OTEL_EXPORTER_OTLP_ENDPOINT.
	Endpoint string `yaml:"endpoint"`
	// Protocol is "http/protobuf" (or "http") or "grpc". Empty means
	// OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf.
	Protocol Protocol `yaml:"protocol"`
	// SampleAdmitted is the fraction of admitted requests whose trace is
	// exported, 0 to 1. Rejected requests' traces are always exported.
	// Nil means 0.01.
	SampleAdmitted *float64 `yaml:"sample_admitted"`
	// ServiceName is the service.name resource attribute. Empty means
	// OTEL_SERVICE_NAME, else "fairgate".
	ServiceName string `yaml:"service_name"`
}

// DefaultSampleAdmitted is the fraction of admitted traces exported when
// tracing.sample_admitted is not set.
const DefaultSampleAdmitted = 0.01

// Protocol is an OTLP transport.
type Protocol string

// The OTLP transports.
const (
	ProtocolHTTP Protocol = "http/protobuf"
	ProtocolGRPC Protocol = "grpc"
)

// UnmarshalText accepts "http/protobuf", "http", "grpc" or empty, and
// rejects anything else at load time.
func (p *Protocol) UnmarshalText(b []byte) error {
	v, err := parseProtocol(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

func parseProtocol(s string) (Protocol, error) {
	switch s {
	case "":
		return "", nil
	case "http/protobuf", "http":
		return ProtocolHTTP, nil
	case "grpc":
		return ProtocolGRPC, nil
	}
	return "", fmt.Errorf("tracing.protocol: unknown OTLP protocol %q (want http/protobuf or grpc)", s)
}

// Validate checks the section; errors name the field.
func (c *TracingConfig) Validate() error {
	var errs []error
	if c.Endpoint != "" {
		if u, err := url.Parse(c.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("tracing.endpoint: %q is not an http(s) URL with a host (e.g. http://127.0.0.1:4318)", c.Endpoint))
		}
	}
	if _, err := parseProtocol(string(c.Protocol)); err != nil {
		errs = append(errs, err)
	}
	if r := c.SampleAdmitted; r != nil && !(*r >= 0 && *r <= 1) {
		errs = append(errs, fmt.Errorf("tracing.sample_admitted: %v is not between 0 and 1", *r))
	}
	return errors.Join(errs...)
}

// NewTracerProvider builds the tracer provider the file's tracing section
// and the standard OTel environment variables (read with getenv) describe,
// or returns nil when tracing is off (no section and no
// OTEL_EXPORTER_OTLP_ENDPOINT). File settings win over the environment.
//
// Every span is recorded; a tail sampler (internal/tailsample) exports the
// whole trace of every rejected request, and admitted ones at
// sample_admitted. The processors in also (a TraceRing for the console)
// see what the tail sampler keeps, beside the exporter. Shutdown flushes
// what is buffered.
func NewTracerProvider(ctx context.Context, cfg *TracingConfig, getenv func(string) string, also ...sdktrace.SpanProcessor) (*sdktrace.TracerProvider, error) {
	var c TracingConfig
	if cfg != nil {
		c = *cfg
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	fromEnv := getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
	if c.Endpoint == "" && !fromEnv {
		if cfg != nil {
			return nil, errors.New("tracing.endpoint: required unless OTEL_EXPORTER_OTLP_ENDPOINT is set")
		}
		return nil, nil
	}
	proto := c.Protocol
	for _, env := range []string{"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"} {
		if proto != "" {
			break
		}
		p, err := parseProtocol(getenv(env))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", env, err)
		}
		proto = p
	}
	service := cmp.Or(c.ServiceName, getenv("OTEL_SERVICE_NAME"), "fairgate")
	ratio := DefaultSampleAdmitted
	if c.SampleAdmitted != nil {
		ratio = *c.SampleAdmitted
	}

	var exp *otlptrace.Exporter
	var err error
	if proto == ProtocolGRPC {
		var opts []otlptracegrpc.Option
		if c.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(c.Endpoint))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	} else {
		var opts []otlptracehttp.Option
		if c.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimSuffix(c.Endpoint, "/")+"/v1/traces"))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithAttributes(attribute.String("service.name", service)))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	var next sdktrace.SpanProcessor = sdktrace.NewBatchSpanProcessor(exp)
	if len(also) > 0 {
		next = append(fanout{next}, also...)
	}
	tail := tailsample.New(next, tailsample.Config{
		Ratio: ratio,
		Keep:  keepRoot,
	})
	return sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithSpanProcessor(tail),
		sdktrace.WithResource(res),
	), nil
}

// keepRoot is the tail sampler's rule: keep every trace of a rejected
// request (or an error, as tailsample.KeepAttr), and of a request shadow
// mode admitted, which is what a shadow rollout is looked at for; the
// others at the ratio.
func keepRoot(s sdktrace.ReadOnlySpan) bool {
	if s.Status().Code == codes.Error {
		return true
	}
	for _, kv := range s.Attributes() {
		switch {
		case kv.Key == admission.AttrDecision && kv.Value.AsString() != admission.OutcomeAdmit:
			return true
		case kv.Key == admission.AttrShadowReject && kv.Value.AsBool():
			return true
		}
	}
	return false
}

// telemetry is the server's tracer, propagator and metrics.
type telemetry struct {
	tracer  trace.Tracer // nil: tracing off
	prop    propagation.TextMapPropagator
	reg     *prometheus.Registry
	metrics *admission.Metrics
	reloads *prometheus.CounterVec
}

func newTelemetry(o *Options, native bool) (*telemetry, error) {
	t := &telemetry{prop: propagation.TraceContext{}, reg: o.Metrics}
	if o.TracerProvider != nil {
		t.tracer = o.TracerProvider.Tracer("github.com/fairgate/fairgate/admission/gateway")
	}
	if t.reg == nil {
		// Our own registry also carries the Go runtime's and the
		// process's metrics (go_*, process_*: memory, GC, goroutines,
		// CPU, open files), which a caller's registry may hold already.
		t.reg = prometheus.NewRegistry()
		if err := t.reg.Register(collectors.NewGoCollector()); err != nil {
			return nil, fmt.Errorf("gateway: metrics: %w", err)
		}
		if err := t.reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})); err != nil {
			return nil, fmt.Errorf("gateway: metrics: %w", err)
		}
	}
	m, err := admission.NewMetricsWith(t.reg, admission.MetricsOptions{NativeHistograms: native})
	if err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	t.metrics = m
	t.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fairgate_config_reloads_total",
		Help: "Config reload attempts by result (ok, error). On error the old config stays.",
	}, []string{"result"})
	if err := t.reg.Register(t.reloads); err != nil {
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	t.reloads.WithLabelValues("ok")
	t.reloads.WithLabelValues("error")
	m.SetBreakerState("closed")
	for _, p := range [...]string{"local", "fail_open", "fail_closed"} {
		m.StorePolicy.WithLabelValues(p, "overload")
	}
	// The Redis store's hooks feed the store metrics; a caller's own
	// hooks still run.
	onPolicy, onBreaker := o.OnRedisPolicy, o.OnBreakerChange
	o.OnRedisPolicy = func(p redisstore.FailurePolicy, cause error) {
		m.StorePolicy.WithLabelValues(p.String(), causeKind(cause)).Inc()
		if onPolicy != nil {
			onPolicy(p, cause)
		}
	}
	o.OnBreakerChange = func(from, to redisstore.BreakerState) {
		m.SetBreakerState(to.String())
		if onBreaker != nil {
			onBreaker(from, to)
		}
	}
	return t, nil
}

// causeKind turns a store failure's cause into a bounded label.
func causeKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, redisstore.ErrBreakerOpen):
		return "breaker_open"
	case errors.Is(err, redisstore.ErrOverloaded):
		return "overload"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	default:
		return "error"
	}
}

// storeCollector reports the Redis store's counters at scrape time (none
// without a Redis store), so the hot path pays only the store's own atomic
// adds: decisions by source, and round trips by result, which says whether
// Redis is answering while the failure policy decides.
type storeCollector struct {
	stats                       func() redisstore.Stats // nil: no Redis store
	decisions, trips, instances *prometheus.Desc
}

func newStoreCollector(stats func() redisstore.Stats) *storeCollector {
	return &storeCollector{stats: stats,
		decisions: prometheus.NewDesc("fairgate_store_decisions_total",
			"Decisions of the shared (Redis) store by source: redis, deny_cache, sync (in process, reconciled with Redis: sync mode's buckets and, by default in either mode, the global backstop), or policy (the failure policy, Redis trouble or overload).",
			[]string{"source"}, nil),
		trips: prometheus.NewDesc("fairgate_store_round_trips_total",
			"Round trips to Redis by result: ok (within redis.timeout), slow (answered later, still used), failed.",
			[]string{"result"}, nil),
		instances: prometheus.NewDesc("fairgate_instances",
			"Gateway instances this one counts as sharing the store: the live count of the fleet's membership in Redis (or redis.instances when set); 1 on the embedded store. Shares of sync mode and the local failure policy, and per-instance concurrency caps, divide by it.",
			nil, nil),
	}
}

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.decisions
	ch <- c.trips
	ch <- c.instances
}

// Collect reports the fleet's count, and on a Redis store its decisions
// and round trips (on the embedded store they would be zeros that say
// nothing).
func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	if c.stats == nil {
		ch <- prometheus.MustNewConstMetric(c.instances, prometheus.GaugeValue, 1)
		return
	}
	st := c.stats()
	ch <- prometheus.MustNewConstMetric(c.instances, prometheus.GaugeValue, float64(st.Instances))
	counter := func(d *prometheus.Desc, v uint64, label string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), label)
	}
	counter(c.decisions, st.Redis, "redis")
	counter(c.decisions, st.DenyCache, "deny_cache")
	counter(c.decisions, st.Policy, "policy")
	counter(c.decisions, st.Sync, "sync")
	counter(c.trips, st.RoundTripsOK, "ok")
	counter(c.trips, st.RoundTripsSlow, "slow")
	counter(c.trips, st.RoundTripsFailed, "failed")
}

// RecordReload counts a config reload attempt in
// fairgate_config_reloads_total: nil is a success. Pass it as
// WatchOptions.OnReload (Reload does not count by itself, so that a file
// that fails to parse counts as well, once).
func (s *Server) RecordReload(err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	s.tel.reloads.WithLabelValues(result).Inc()
}

// Metrics returns the registry /metrics serves, for a caller to add its
// own collectors to.
func (s *Server) Metrics() *prometheus.Registry { return s.tel.reg }
