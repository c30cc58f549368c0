package admission

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The RED metrics (rate, errors, duration), what a dashboard starts from:
// every answer by status code and tier (fairgate_responses_total), how long
// each took by tier, route, outcome and status class
// (fairgate_request_duration_seconds), and how long the upstream took to
// answer by route and status class (fairgate_upstream_duration_seconds).
// Each is a classic histogram (its buckets below) and, with
// MetricsOptions.NativeHistograms, a native one too, which a Prometheus
// scraping the protobuf format with native histograms on reads instead:
// off by default, since its sparse buckets cost each observation more
// atomic work on shared cache lines, which cores answering the same
// series contend for.
//
// A series is made on the first answer of its labels, so a family shows
// on /metrics once it has one: the rate limit service alone, which answers
// no HTTP requests, exports none. Labels are bounded by the config: tier
// and route are configured names ("" before the pipeline named them: an
// answer of the edge's own, a request without a valid key), code the
// three digits of an HTTP status.

// redBuckets are the classic buckets of both duration histograms: from a
// rejection's sub-millisecond answer to a long export's seconds.
var redBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// The request outcomes of fairgate_request_duration_seconds.
const (
	OutcomeAdmitted = "admitted"
	OutcomeRejected = "rejected"
)

// StatusClassError is the status class of an upstream call that got no
// answer (refused, reset, timed out) in fairgate_upstream_duration_seconds.
const StatusClassError = "error"

var statusClasses = [...]string{"0xx", "1xx", "2xx", "3xx", "4xx", "5xx"}

// statusClass is "2xx" for 200 to 299, and so on; 0, no answer, is
// StatusClassError.
func statusClass(code int) string {
	if code == 0 {
		return StatusClassError
	}
	if c := code / 100; c >= 1 && c < len(statusClasses) {
		return statusClasses[c]
	}
	return "other"
}

// red holds the RED families and, per label set, its series, each looked
// up once and cached, as Metrics.count does for decisions.
type red struct {
	requests  *prometheus.HistogramVec
	upstream  *prometheus.HistogramVec
	responses *prometheus.CounterVec

	mu   sync.RWMutex
	reqs map[requestLabels]requestSeries
	ups  map[upstreamLabels]prometheus.Observer
}

type requestLabels struct {
	tier, route string
	admitted    bool
	code        int
}

type requestSeries struct {
	duration  prometheus.Observer
	responses prometheus.Counter
}

type upstreamLabels struct {
	route string
	code  int // the class's first code: 200 for 2xx, 0 for no answer
}

func newRED(native bool) *red {
	hist := func(name, help string, labels ...string) *prometheus.HistogramVec {
		o := prometheus.HistogramOpts{Name: name, Help: help, Buckets: redBuckets}
		if native {
			o.NativeHistogramBucketFactor, o.NativeHistogramMaxBucketNumber, o.NativeHistogramMinResetDuration = 1.1, 100, time.Hour
		}
		return prometheus.NewHistogramVec(o, labels)
	}
	return &red{
		requests: hist("fairgate_request_duration_seconds",
			"Time from a request's arrival to the end of its answer (the body's last byte handed to the connection), by tier, route template, outcome (admitted: every layer admitted it; rejected: a layer refused it, the edge answered it first, or the client left before the decision) and status class.",
			"tier", "route", "outcome", "status_class"),
		upstream: hist("fairgate_upstream_duration_seconds",
			"Time from the upstream call's start to the upstream's response headers (what the adaptive limit learns), by route template and status class (error: no answer, the call was refused, reset or timed out).",
			"route", "status_class"),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_responses_total",
			Help: "Answers by HTTP status code and tier (\"\" when no tenant was identified).",
		}, []string{"code", "tier"}),
		reqs: map[requestLabels]requestSeries{},
		ups:  map[upstreamLabels]prometheus.Observer{},
	}
}

func (r *red) collectors() []prometheus.Collector {
	return []prometheus.Collector{r.requests, r.upstream, r.responses}
}

func (r *red) request(k requestLabels, elapsed time.Duration) {
	r.mu.RLock()
	s, ok := r.reqs[k]
	r.mu.RUnlock()
	if !ok {
		outcome := OutcomeRejected
		if k.admitted {
			outcome = OutcomeAdmitted
		}
		s = requestSeries{
			duration:  r.requests.WithLabelValues(k.tier, k.route, outcome, statusClass(k.code)),
			responses: r.responses.WithLabelValues(strconv.Itoa(k.code), k.tier),
		}
		r.mu.Lock()
		r.reqs[k] = s
		r.mu.Unlock()
	}
	s.duration.Observe(elapsed.Seconds())
	s.responses.Inc()
}

func (r *red) upstreamCall(route string, status int, elapsed time.Duration) {
	k := upstreamLabels{route: route, code: status / 100 * 100}
	r.mu.RLock()
	o := r.ups[k]
	r.mu.RUnlock()
	if o == nil {
		o = r.upstream.WithLabelValues(route, statusClass(k.code))
		r.mu.Lock()
		r.ups[k] = o
		r.mu.Unlock()
	}
	o.Observe(elapsed.Seconds())
}

// RequestMetrics records one request in the RED metrics: started when the
// request arrives (Gate.StartRequest), labelled by its decision (Decided)
// and recorded once its answer is written (Answered). Gate.Middleware does
// all three; a stack that drives the pipeline with Gate.Admit does them
// itself. The zero value, or one from a gate without metrics, records
// nothing. It is a value that outlives the decision (a streamed body ends
// after the handler returned).
type RequestMetrics struct {
	g      *Gate // nil: records nothing
	start  time.Duration
	labels requestLabels
}

// StartRequest starts the RED record of a request arriving now.
func (g *Gate) StartRequest() RequestMetrics {
	if g.metrics == nil {
		return RequestMetrics{}
	}
	return RequestMetrics{g: g, start: g.elapsed()}
}

// Decided labels the record by d: its tenant's tier, its route and
// whether every layer admitted it, the adaptive limit at the upstream
// call's start (Lease.StartUpstream) too: call it again after that. Without
// it the request is an answer of the edge's own (tier and route "",
// rejected).
func (r *RequestMetrics) Decided(d *Decision) {
	if r.g == nil {
		return
	}
	r.labels = requestLabels{admitted: d.Allowed && !d.lease.refused}
	if d.Tenant != nil {
		r.labels.tier = d.Tenant.Tier
	}
	if d.Route != nil {
		r.labels.route = d.Route.Name
	}
}

// Answered records the request, whose answer had status (0: nothing was
// written, which HTTP sends as 200), with the time since StartRequest.
// Later calls record nothing.
func (r *RequestMetrics) Answered(status int) {
	if r.g == nil {
		return
	}
	if status == 0 {
		status = 200
	}
	r.labels.code = status
	r.g.metrics.red.request(r.labels, r.g.elapsed()-r.start)
	r.g = nil
}
