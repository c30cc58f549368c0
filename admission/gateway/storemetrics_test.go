package gateway

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairgate/fairgate/admission/redisstore"
)

// TestStoreMetrics: the overload cause gets its own label, and the store's
// counters are exported as decisions by source and round trips by result
// (what the FairgateRateLayerOverloaded alert divides), and the instances
// this one counts as fairgate_instances.
func TestStoreMetrics(t *testing.T) {
	if got := causeKind(fmt.Errorf("wrapped: %w", redisstore.ErrOverloaded)); got != "overload" {
		t.Errorf("causeKind(ErrOverloaded) = %q, want overload", got)
	}
	st := redisstore.Stats{Redis: 990, DenyCache: 5, Policy: 20, Sync: 7, Overloaded: 15, RoundTripsOK: 40, RoundTripsSlow: 2, RoundTripsFailed: 1, Instances: 3}
	reg := prometheus.NewRegistry()
	reg.MustRegister(newStoreCollector(func() redisstore.Stats { return st }))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 0 {
				got[mf.GetName()] = m.GetGauge().GetValue()
				continue
			}
			got[mf.GetName()+"/"+m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{
		"fairgate_store_decisions_total/redis": 990, "fairgate_store_decisions_total/deny_cache": 5,
		"fairgate_store_decisions_total/policy": 20, "fairgate_store_decisions_total/sync": 7, "fairgate_store_round_trips_total/ok": 40,
		"fairgate_store_round_trips_total/slow": 2, "fairgate_store_round_trips_total/failed": 1,
		"fairgate_instances": 3,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("gathered %v\nwant %v", got, want)
	}
}
