package admission

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairgate/fairgate/bulkhead"
	"github.com/fairgate/fairgate/internal/fakeclock"
	"github.com/fairgate/fairgate/tenant"
)

// historyGate is a gate of the test tenants on a fake clock, with metrics
// (the admitted counts come from them); with pools, one seat each for the
// enterprise and starter tiers and no queue.
func historyGate(t *testing.T, pools bool) (*Gate, *fakeclock.Clock) {
	t.Helper()
	cfg := testConfig()
	if pools {
		cfg.Bulkhead = &bulkhead.Config{Total: 2, Pools: map[string]bulkhead.PoolConfig{
			"enterprise": {Share: 1}, "starter": {Share: 1}}}
	}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	clk := fakeclock.New()
	g, err := New(cfg, testRegistry(t), Options{Now: clk.Now, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	return g, clk
}

func tenantSeries(t *testing.T, v HistoryView, id string) TenantHistory {
	t.Helper()
	for _, th := range v.Tenants {
		if th.ID == id {
			return th
		}
	}
	t.Fatalf("no history of tenant %s in %+v", id, v.Tenants)
	return TenantHistory{}
}

func poolSeries(t *testing.T, v HistoryView, name string) PoolHistory {
	t.Helper()
	for _, p := range v.Pools {
		if p.Name == name {
			return p
		}
	}
	t.Fatalf("no history of pool %s in %+v", name, v.Pools)
	return PoolHistory{}
}

// tally counts decisions as the history should: admitted, rejected, and
// rejected by the overload layers.
type tally struct{ admitted, rejected, overload int64 }

func (c *tally) count(d Decision) {
	switch {
	case d.Allowed:
		c.admitted++
	case d.Layer == LayerShed || d.Layer == LayerBulkhead || d.Layer == LayerAdaptive:
		c.overload++
		c.rejected++
	default:
		c.rejected++
	}
}

// TestHistoryCountsIntervals: a sample counts what happened since the
// previous one (the admitted by difference of the decision counters, the
// rejections from the last minute's slots), and the gauges at its instant;
// a quiet interval after a busy one counts nothing.
func TestHistoryCountsIntervals(t *testing.T) {
	g, clk := historyGate(t, true)
	h := NewHistory(g, clk.Now())
	v := h.View("")
	if v.Last != nil || len(v.Tenants) != 2 || len(v.Pools) != 2 || v.ResolutionSeconds != 10 || v.Samples != 90 {
		t.Fatalf("new history = %+v, want 2 empty tenants, 2 empty pools, 10 s × 90", v)
	}
	for _, th := range v.Tenants {
		if th.Last != nil || th.Admitted == nil || len(th.Admitted)+len(th.Rejected)+len(th.InFlight) != 0 {
			t.Errorf("new tenant history %+v, want empty (and admitted counted)", th)
		}
	}

	var acme, initech tally
	for range 3 {
		acme.count(mustCheck(t, g, req("ent-key", "GET", "/api/v1/users/me")))
	}
	held, err := g.Check(context.Background(), req("start-key", "GET", "/api/v1/search"))
	if err != nil || !held.Allowed {
		t.Fatalf("initech's first search: %+v, %v", held, err)
	}
	initech.count(held)
	for range 6 { // the starter pool's one seat is held, its tokens run out
		initech.count(mustCheck(t, g, req("start-key", "GET", "/api/v1/search")))
	}
	if initech.overload == 0 || initech.rejected == initech.overload {
		t.Fatalf("initech's decisions %+v: want both overload and limit rejections", initech)
	}
	clk.Advance(HistoryResolution)
	first := clk.Now()
	h.Sample(first)
	clk.Advance(HistoryResolution)
	held.Lease().Release()
	h.Sample(clk.Now())

	v = h.View("")
	if v.Last == nil || !v.Last.Equal(clk.Now()) {
		t.Errorf("last = %v, want %v", v.Last, clk.Now())
	}
	for _, c := range []struct {
		id       string
		want     tally
		inFlight int64
	}{{"acme", acme, 0}, {"initech", initech, 1}} {
		th := tenantSeries(t, v, c.id)
		got := TenantHistory{ID: c.id, Admitted: th.Admitted, Rejected: th.Rejected, Overload: th.Overload, InFlight: th.InFlight}
		want := TenantHistory{ID: c.id, Admitted: []int64{c.want.admitted, 0}, Rejected: []int64{c.want.rejected, 0},
			Overload: []int64{c.want.overload, 0}, InFlight: []int64{c.inFlight, 0}}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("tenant %s history (-want +got):\n%s", c.id, d)
		}
		if th.Last == nil || !th.Last.Equal(clk.Now()) {
			t.Errorf("tenant %s last = %v, want %v", c.id, th.Last, clk.Now())
		}
	}
	starter := poolSeries(t, v, "starter")
	want := PoolHistory{Name: "starter", InFlight: []int64{1, 0}, Seats: []int64{1, 1}, Queued: []int64{0, 0},
		Admitted: []int64{1, 0}, MeanWaitMs: []float64{0, 0}, ShedThreshold: []int64{0, 0}}
	starter.Last = nil
	if d := cmp.Diff(want, starter); d != "" {
		t.Errorf("starter pool history (-want +got):\n%s", d)
	}
	if ent := poolSeries(t, v, "enterprise"); !cmp.Equal(ent.Admitted, []int64{3, 0}) {
		t.Errorf("enterprise pool admitted = %v, want [3 0]", ent.Admitted)
	}
}

// TestHistoryRingWraps: each series keeps the last HistorySamples samples,
// oldest first.
func TestHistoryRingWraps(t *testing.T) {
	g, clk := historyGate(t, false)
	h := NewHistory(g, clk.Now())
	const samples = HistorySamples + 7
	var want []int64
	for i := 1; i <= samples; i++ {
		for range i % 5 {
			mustCheck(t, g, req("ent-key", "GET", "/api/v1/users/me"))
		}
		clk.Advance(HistoryResolution)
		h.Sample(clk.Now())
		want = append(want, int64(i%5))
	}
	acme := tenantSeries(t, h.View(""), "acme")
	if d := cmp.Diff(want[samples-HistorySamples:], acme.Admitted); d != "" {
		t.Errorf("acme admitted after %d samples (-want +got):\n%s", samples, d)
	}
	if len(acme.Rejected) != HistorySamples || len(acme.InFlight) != HistorySamples {
		t.Errorf("series of %d and %d samples, want %d", len(acme.Rejected), len(acme.InFlight), HistorySamples)
	}
}

// TestHistoryFollowsReload: a reload's removed tenant is dropped at the
// next sample and its added one starts empty there; the kept tenant's
// history goes on. The added tenant's first sample counts from the sample
// that found it, not from the gate's start.
func TestHistoryFollowsReload(t *testing.T) {
	g, clk := historyGate(t, false)
	h := NewHistory(g, clk.Now())
	for range 2 {
		mustCheck(t, g, req("ent-key", "GET", "/api/v1/users/me"))
		clk.Advance(HistoryResolution)
		h.Sample(clk.Now())
	}
	tc := testTenants(5)
	tc.Tenants = []tenant.TenantConfig{tc.Tenants[0], // acme stays, initech goes
		{ID: "hooli", Tier: "starter", APIKeysSHA256: []string{tenant.HashKey("hooli-key")}}}
	if err := g.Reload(context.Background(), testConfig(), testRegistryOf(t, tc)); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, g, req("hooli-key", "GET", "/api/v1/users/me")) // before the sample that finds hooli
	clk.Advance(HistoryResolution)
	h.Sample(clk.Now())
	v := h.View("")
	if len(v.Tenants) != 2 || v.Tenants[0].ID != "acme" || v.Tenants[1].ID != "hooli" {
		t.Fatalf("tenants after the reload: %+v, want acme and hooli", v.Tenants)
	}
	if got := v.Tenants[0].Admitted; !cmp.Equal(got, []int64{1, 1, 0}) {
		t.Errorf("acme admitted = %v, want [1 1 0]", got)
	}
	if hooli := v.Tenants[1]; hooli.Last != nil || len(hooli.Admitted) != 0 {
		t.Errorf("hooli at the sample that found it: %+v, want empty", hooli)
	}

	for range 2 {
		mustCheck(t, g, req("hooli-key", "GET", "/api/v1/users/me"))
	}
	clk.Advance(HistoryResolution)
	h.Sample(clk.Now())
	if got := tenantSeries(t, h.View(""), "hooli").Admitted; !cmp.Equal(got, []int64{2}) {
		t.Errorf("hooli admitted = %v, want [2]", got)
	}
}

// TestHistoryWithoutMetrics: without Options.Metrics nothing counts the
// admitted requests, so the series is left out rather than shown as zeros.
func TestHistoryWithoutMetrics(t *testing.T) {
	clk := fakeclock.New()
	g, err := New(testConfig(), testRegistry(t), Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	h := NewHistory(g, clk.Now())
	for range 8 {
		mustCheck(t, g, req("start-key", "GET", "/api/v1/search"))
	}
	clk.Advance(time.Second)
	h.Sample(clk.Now())
	th := tenantSeries(t, h.View(""), "initech")
	if th.Admitted != nil || !cmp.Equal(th.Rejected, []int64{3}) {
		t.Errorf("initech without metrics: %+v, want no admitted and 3 rejected", th)
	}
	b, err := json.Marshal(th)
	if err != nil || strings.Contains(string(b), "admitted") {
		t.Errorf("JSON %s, %v: want no admitted field", b, err)
	}
}
