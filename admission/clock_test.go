package admission

import (
	"testing"
	"time"

	"github.com/fairgate/fairgate/bulkhead"
	"github.com/fairgate/fairgate/internal/fakeclock"
	"github.com/fairgate/fairgate/shed"
)

// TestObserveAfterClockWentBack (issue 12): the shedders were told the
// pools' pressure at most twenty times a calibration interval, timed in
// wall-clock nanoseconds, so a clock stepped back an hour froze shedding
// recalibration for an hour. Intervals are now monotonic with time.Now,
// and a clock without a monotonic reading that goes back observes at once.
func TestObserveAfterClockWentBack(t *testing.T) {
	clk := fakeclock.New()
	cfg := testConfig()
	cfg.Bulkhead = &bulkhead.Config{Total: 4, Pools: map[string]bulkhead.PoolConfig{
		"enterprise": {Share: 1, QueueLength: 2, MaxWait: time.Second},
		"starter":    {Share: 1, QueueLength: 2, MaxWait: time.Second},
	}}
	cfg.Shedding = &shed.SheddingConfig{}
	g, err := New(cfg, testRegistry(t), Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	ps := g.shedders["enterprise"]
	clk.Advance(time.Minute)
	g.observe(ps, "enterprise")
	first := ps.nextObserve.Load()
	g.observe(ps, "enterprise")
	if got := ps.nextObserve.Load(); got != first {
		t.Fatalf("observed again within the interval: next %d -> %d", first, got)
	}
	clk.Advance(-time.Hour)
	g.observe(ps, "enterprise")
	if got := ps.nextObserve.Load(); got == first {
		t.Fatal("after the clock went back an hour, no observation until the hour has passed again")
	}
}
