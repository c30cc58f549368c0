package admission

import "github.com/prometheus/client_golang/prometheus"

// settleMetrics are the families of settled routes (settle.go), by route
// template: no series until a route settles.
type settleMetrics struct {
	cost       *prometheus.CounterVec
	ratio      *prometheus.HistogramVec
	unreported *prometheus.CounterVec
	errs       *prometheus.CounterVec
}

func newSettleMetrics() *settleMetrics {
	return &settleMetrics{
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_settled_cost_total",
			Help: "Tokens charged for settled requests once the upstream answered: what they used, bounded by settle.max (0 for a status charge_on_status does not charge).",
		}, []string{"route"}),
		ratio: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fairgate_settle_used_ratio",
			Help:    "What a settled request used over its route's reserve: below 1 the reserve is too high (tokens held until refunded), above 1 too low (the tenant admitted past its quota until the debt is repaid). Tune settle.reserve by it.",
			Buckets: []float64{0, .1, .25, .5, .75, 1, 1.5, 2, 4, 8, 16, 100},
		}, []string{"route"}),
		unreported: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_settle_unreported_total",
			Help: "Answers of settled routes without a usable usage field: charged the reserve.",
		}, []string{"route"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fairgate_settle_errors_total",
			Help: "Settlements the store failed: the reserve stands.",
		}, []string{"route"}),
	}
}

func (s *settleMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{s.cost, s.ratio, s.unreported, s.errs}
}

// settled records a settled request of route, which reserved reserve and
// used used; reported is false when the upstream said nothing.
func (m *Metrics) settled(route string, reserve, used float64, reported bool) {
	m.settle.cost.WithLabelValues(route).Add(used)
	m.settle.ratio.WithLabelValues(route).Observe(used / reserve)
	if !reported {
		m.settle.unreported.WithLabelValues(route).Inc()
	}
}
