package bench

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fairgate/fairgate/bench/plotdata"
	"github.com/fairgate/fairgate/shed"
)

// synthRun builds a run of tenants from a per-tenant recipe: n arrivals
// of which the first ok are 2xx taking lat each, then rejected 503s of
// 1 ms (layer "shed", reason "shed_priority").
type synthTenant struct {
	tl           TenantLoad
	n, ok        int
	lat          time.Duration
	timeouts     int
	timeoutAfter time.Duration
}

func synthRun(mode string, ts []synthTenant) run {
	r := run{mode: mode, dur: 10 * time.Second}
	for i, st := range ts {
		r.tenants = append(r.tenants, st.tl)
		for k := range st.n {
			s := sample{tenant: i, crit: shed.Default, at: time.Duration(k) * time.Millisecond}
			switch {
			case k < st.ok:
				s.outcome, s.latency = OK, st.lat
			case k < st.ok+st.timeouts:
				s.outcome, s.latency = TimedOut, st.timeoutAfter
			default:
				s.outcome, s.latency, s.layer, s.reason = Rejected503, time.Millisecond, "shed", "shed_priority"
			}
			r.samples = append(r.samples, s)
		}
	}
	return r
}

func tl(id, tier string, role Role) TenantLoad { return TenantLoad{ID: id, Tier: tier, Role: role} }

// synthResults is a baseline where every innocent takes 10 ms, a none run
// where b suffers in latency, and a fairgate run where c loses requests.
func synthResults() *Results {
	a, b, c, loud := tl("a", "pro", Innocent), tl("b", "pro", Innocent), tl("c", "starter", Innocent), tl("loud", "pro", Noisy)
	res := &Results{Scenario: "synthetic", Baseline: "none", Targets: defaultTargets, DurationS: 10, BaselineS: 5,
		Machine: Machine{Cores: 2, GOMAXPROCS: 2, LoadStart: []float64{0.5, 0.4, 0.3}, LoadEnd: []float64{1.5, 0.9, 0.5}}}
	res.add(synthRun("baseline", []synthTenant{
		{tl: a, n: 100, ok: 100, lat: 10 * time.Millisecond},
		{tl: b, n: 100, ok: 100, lat: 10 * time.Millisecond},
		{tl: c, n: 100, ok: 100, lat: 20 * time.Millisecond},
	}))
	res.add(synthRun("none", []synthTenant{
		{tl: a, n: 100, ok: 100, lat: 12 * time.Millisecond},
		// b: every request admitted, 5 of them only after the client gave up.
		{tl: b, n: 100, ok: 95, lat: 10 * time.Millisecond, timeouts: 5, timeoutAfter: 2 * time.Second},
		{tl: c, n: 100, ok: 100, lat: 20 * time.Millisecond},
		{tl: loud, n: 1000, ok: 1000, lat: 3 * time.Second},
	}))
	res.add(synthRun("fairgate", []synthTenant{
		{tl: a, n: 100, ok: 100, lat: 11 * time.Millisecond},
		{tl: b, n: 100, ok: 100, lat: 10 * time.Millisecond},
		// c: 10 fast rejections, which must not make its latency look good.
		{tl: c, n: 100, ok: 90, lat: 25 * time.Millisecond},
		{tl: loud, n: 1000, ok: 100, lat: 50 * time.Millisecond},
	}))
	return res
}

func TestWorstInnocent(t *testing.T) {
	res := synthResults()
	if len(res.Worst) != 2 {
		t.Fatalf("%d headlines, want 2 (none, fairgate): %+v", len(res.Worst), res.Worst)
	}
	// none: b's timeouts put its p99 at 2 s, 200× its baseline, and cost
	// it 5% of goodput; a's 1.2× is no excuse and no average hides b.
	// fairgate: c lost 10%, and its p99 is over the 90 admitted only
	// (25 ms ÷ 20 ms), not lowered by its fast rejections.
	for i, want := range []Worst{
		{Mode: "none", GoodputTenant: "b", GoodputPct: 95, P99Tenant: "b", P99Ratio: 200},
		{Mode: "fairgate", GoodputTenant: "c", GoodputPct: 90, P99Tenant: "c", P99Ratio: 1.25},
	} {
		got := res.Worst[i]
		if got.Mode != want.Mode || got.GoodputTenant != want.GoodputTenant || got.GoodputPct != want.GoodputPct ||
			got.P99Tenant != want.P99Tenant || math.Abs(got.P99Ratio-want.P99Ratio) > 1e-9 || got.Met {
			t.Errorf("headline %d = %+v, want %+v and the targets missed", i, got, want)
		}
	}
	none, fg := res.Worst[0], res.Worst[1]
	if none.Innocents != 3 || none.NoisyOKPerS != 100 || none.NoisyOfferedPerS != 100 {
		t.Errorf("none: %d innocents, noisy %.1f of %.1f/s; want 3, 100 of 100", none.Innocents, none.NoisyOKPerS, none.NoisyOfferedPerS)
	}
	if got, want := fg.MedianGoodputPct, 100.0; got != want {
		t.Errorf("fairgate median goodput = %v, want %v", got, want)
	}
	var c TenantFigures
	for _, f := range res.Tenants {
		if f.Mode == "fairgate" && f.Tenant == "c" {
			c = f
		}
	}
	if c.Rejected != 10 || c.RejectedPct != 10 || c.RejectedBy["shed"] != 10 || c.Admitted != 90 || c.AdmittedP99 != 25 {
		t.Errorf("fairgate c = %+v", c)
	}
}

func TestWorstInnocentMeetsTargets(t *testing.T) {
	figs := []TenantFigures{
		{Mode: "fairgate", Tenant: "x", Role: Innocent, Offered: 100, GoodputPct: 99.5, Admitted: 99, P99Ratio: 1.15},
		{Mode: "fairgate", Tenant: "y", Role: Innocent, Offered: 100, GoodputPct: 100, Admitted: 100, P99Ratio: 1.1},
		{Mode: "fairgate", Tenant: "idle", Role: Innocent}, // no arrivals: not judged
		{Mode: "fairgate", Tenant: "z", Role: Noisy, Offered: 100, GoodputPct: 1},
	}
	w := worstInnocent(figs, 1, defaultTargets)
	if !w.Met || w.GoodputTenant != "x" || w.P99Tenant != "x" || w.Innocents != 2 {
		t.Errorf("worstInnocent = %+v, want x worst on both and the targets met", w)
	}
	figs[1].P99Ratio = 1.6
	if w := worstInnocent(figs, 1, defaultTargets); w.Met || w.P99Tenant != "y" {
		t.Errorf("worstInnocent = %+v, want y's 1.6× to miss the targets", w)
	}
	if w := worstInnocent(figs, 1, Targets{}); w.Met {
		t.Error("a scenario without targets met them")
	}
}

func TestReportRendering(t *testing.T) {
	var b bytes.Buffer
	if err := WriteReport(&b, synthResults()); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"Machine: 2 cores, GOMAXPROCS 2; load average (1, 5, 15 min) 0.50 0.40 0.30 at the start, 1.50 0.90 0.50 at the end.",
		"| none | 95.00% (b) | 200.00× (b) |",
		"missed (negative control, as it should)",
		"| fairgate | 90.00% (c) | 1.25× (c) |",
		"**missed**",
		"### fairgate, per tenant",
		"| c | starter | innocent | 100 | 90.00% | 10.00% | 0 | 25.0 ms (n=90) | 20.0 ms | 1.25× | shed/shed_priority 10 |",
		"| loud | pro | noisy | 1000 | 10.00% | 90.00% |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
}

// A none mode that meets the targets is shouted about: the scenario does
// not hurt, so it measures nothing.
func TestReportFlagsHarmlessScenario(t *testing.T) {
	res := synthResults()
	res.Worst[0].Met = true
	var b bytes.Buffer
	WriteReport(&b, res)
	if !strings.Contains(b.String(), "the negative control should miss them") {
		t.Errorf("report does not flag a none mode meeting the targets:\n%s", b.String())
	}
}

// Past maxTenantRows tenants, a mode's table keeps the noisy tenants and
// the worst innocents and sums up the rest.
func TestReportManyTenants(t *testing.T) {
	var base, hit []synthTenant
	for i := range 40 {
		x := synthTenant{tl: tl(fmt.Sprintf("t%02d", i), "starter", Innocent), n: 100, ok: 100, lat: 10 * time.Millisecond}
		base = append(base, x)
		if i == 17 {
			x.ok = 50 // the one who suffers
		}
		hit = append(hit, x)
	}
	hit = append(hit, synthTenant{tl: tl("loud", "pro", Noisy), n: 500, ok: 10, lat: 10 * time.Millisecond})
	res := &Results{Scenario: "many", Targets: defaultTargets}
	res.add(synthRun("baseline", base))
	res.add(synthRun("fairgate", hit))
	var b bytes.Buffer
	WriteReport(&b, res)
	got := b.String()
	table := got[strings.Index(got, "### fairgate, per tenant"):]
	if n := strings.Count(table, "| innocent |"); n > 10 {
		t.Errorf("fairgate table lists %d innocents, want ≤ 10", n)
	}
	for _, want := range []string{"| loud | pro | noisy |", "| t17 | starter | innocent | 100 | 50.00% |", "more innocent tenants | | | | median 100.00%", "| fairgate | 50.00% (t17) |"} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
}

func TestParseLoadAvg(t *testing.T) {
	got, err := parseLoadAvg("0.91 0.70 0.79 7/114 6393\n")
	if err != nil || len(got) != 3 || got[0] != 0.91 || got[2] != 0.79 {
		t.Fatalf("parseLoadAvg = %v, %v", got, err)
	}
	if _, err := parseLoadAvg("0.91"); err == nil {
		t.Error("parseLoadAvg accepted one field")
	}
	m := Machine{Cores: 2, GOMAXPROCS: 2, LoadStart: []float64{1.5, 1, 1}}
	if !strings.Contains(m.String(), "busy") || strings.Contains(m.String(), "unknown at the start") {
		t.Errorf("Machine.String() = %q, want a busy note", m.String())
	}
	if s := (Machine{Cores: 2, GOMAXPROCS: 2}).String(); !strings.Contains(s, "unknown at the start, unknown at the end") || strings.Contains(s, "GOGC") {
		t.Errorf("Machine.String() = %q", s)
	}
	for gc, want := range map[int]string{400: "GOMAXPROCS 2, GOGC 400;", -1: "GOMAXPROCS 2, GOGC off;"} {
		if s := (Machine{Cores: 2, GOMAXPROCS: 2, GCPercent: gc}).String(); !strings.Contains(s, want) {
			t.Errorf("Machine{GCPercent: %d}.String() = %q, want %q", gc, s, want)
		}
	}
}

// manyResults is a run of 40 innocents, tNN losing NN% of its requests
// and slower by NN ms, and one loud noisy tenant: past maxPlotInnocents.
func manyResults() *Results {
	many := &Results{Scenario: "many", Targets: defaultTargets, DurationS: 10}
	var base, hit []synthTenant
	for i := range 40 {
		x := synthTenant{tl: tl(fmt.Sprintf("t%02d", i), "starter", Innocent), n: 100, ok: 100 - i, lat: time.Duration(10+i) * time.Millisecond}
		base, hit = append(base, x), append(hit, x)
	}
	hit = append(hit, synthTenant{tl: tl("loud", "pro", Noisy), n: 500, ok: 10, lat: 300 * time.Millisecond})
	many.add(synthRun("baseline", base))
	many.add(synthRun("fairgate", hit))
	return many
}

// windowed cuts samples into windows of arrival time: percentiles over the
// admitted (2xx and timeouts) only, floored at 1 ms for the log axis, the
// rejected share over the requests sent, deferred arrivals in neither, and
// a window with nothing sent has no point.
func TestWindowed(t *testing.T) {
	r := run{mode: "m", dur: 2 * time.Second, tenants: []TenantLoad{tl("a", "pro", Innocent), tl("b", "pro", Innocent)}}
	add := func(tenant int, at time.Duration, o Outcome, lat time.Duration) {
		r.samples = append(r.samples, sample{tenant: tenant, at: at, outcome: o, latency: lat})
	}
	for i := range 100 { // window 0: 1..100 ms admitted
		add(0, time.Duration(i)*5*time.Millisecond, OK, time.Duration(i+1)*time.Millisecond)
	}
	add(0, 1100*time.Millisecond, OK, 100*time.Microsecond)         // window 1: a fast 2xx, floored at 1 ms,
	add(0, 1200*time.Millisecond, TimedOut, 2*time.Second)          // a timeout at the client's timeout,
	add(0, 1300*time.Millisecond, Rejected429, time.Millisecond)    // a 429,
	add(0, 1400*time.Millisecond, Rejected503, time.Millisecond)    // a 503
	add(0, 1500*time.Millisecond, Deferred, 0)                      // and a deferred arrival, counted nowhere;
	add(1, 500*time.Millisecond, Rejected503, 900*time.Millisecond) // b is not in the series.
	got := windowed(r, func(i int) bool { return i == 0 }, time.Second)
	want := plotdata.Series{
		WindowS:  1,
		P50:      []plotdata.Point{{S: 0.5, V: 50}, {S: 1.5, V: 1}},
		P99:      []plotdata.Point{{S: 0.5, V: 99}, {S: 1.5, V: 2000}},
		Rejected: []plotdata.Point{{S: 0.5, V: 0}, {S: 1.5, V: 50}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("windowed (-want +got):\n%s", diff)
	}
	// The last window's point sits at the run's end, not past it.
	add(0, 2*time.Second, OK, 5*time.Millisecond)
	if got := windowed(r, func(i int) bool { return i == 0 }, time.Second); len(got.P50) != 3 || got.P50[2] != (plotdata.Point{S: 2, V: 5}) {
		t.Errorf("windowed P50 = %v, want a third point {2 5}", got.P50)
	}
	if got := windowed(r, func(int) bool { return false }, time.Second); got.P50 == nil || len(got.P50)+len(got.P99)+len(got.Rejected) != 0 {
		t.Errorf("windowed over no tenant = %+v, want empty series, not nil", got)
	}
}

// A window holds about ten of a tenant's requests, within a thirtieth and
// a quarter of the run (at least half a second).
func TestWindowFor(t *testing.T) {
	r := synthRun("m", []synthTenant{{tl: tl("a", "pro", Innocent), n: 100}, {tl: tl("b", "pro", Innocent), n: 100}})
	for _, c := range []struct {
		n    int
		want time.Duration
	}{{1, time.Second}, {2, 500 * time.Millisecond}, {40, 500 * time.Millisecond}} {
		if got := windowFor(r, c.n); got != c.want {
			t.Errorf("windowFor(%d tenants of 100 samples each, 10s) = %v, want %v", c.n, got, c.want)
		}
	}
	r.samples = r.samples[:4] // 2 per tenant: 50 s windows, capped at a quarter of the run
	if got, want := windowFor(r, 1), 2500*time.Millisecond; got != want {
		t.Errorf("windowFor(sparse) = %v, want %v", got, want)
	}
}

// What the plots draw: with few tenants every one of them, the ramp marked
// but on the baseline, a bar per tenant; with many the noisy tenant and the
// worst innocents over the innocents pooled, and summary bars. The file
// bench/plots reads says the same.
func TestPlotSeries(t *testing.T) {
	few := synthResults()
	few.RampStartS, few.RampPeakS = 1, 4
	p := few.plots()
	if len(p.Runs) != 3 || p.Runs[0].Mode != "baseline" || p.Runs[0].Ramp || !p.Runs[1].Ramp || !p.Runs[2].Ramp {
		t.Fatalf("runs %+v, want baseline (no ramp), none and fairgate (ramp)", p.Runs)
	}
	var labels []string
	for _, tn := range p.Runs[2].Tenants {
		labels = append(labels, tn.Label)
	}
	if want := []string{"a (pro, innocent)", "b (pro, innocent)", "c (starter, innocent)", "loud (pro, noisy)"}; !slices.Equal(labels, want) || p.Runs[2].Pooled != nil {
		t.Errorf("fairgate draws %q (pooled %v), want %q alone", labels, p.Runs[2].Pooled, want)
	}
	wantGoodput := plotdata.Goodput{Modes: []string{"baseline", "none", "fairgate"}, TargetPct: defaultTargets.MinGoodputPct, Bars: []plotdata.Bars{
		{Label: "a (pro, innocent)", Pct: []float64{100, 100, 100}, Ran: []bool{true, true, true}},
		{Label: "b (pro, innocent)", Pct: []float64{100, 95, 100}, Ran: []bool{true, true, true}},
		{Label: "c (starter, innocent)", Pct: []float64{100, 100, 90}, Ran: []bool{true, true, true}},
		{Label: "loud (pro, noisy)", Pct: []float64{0, 100, 10}, Ran: []bool{false, true, true}},
	}}
	if diff := cmp.Diff(wantGoodput, p.Goodput); diff != "" {
		t.Errorf("goodput (-want +got):\n%s", diff)
	}

	many := manyResults()
	p = many.plots()
	fg := p.Runs[1]
	if fg.Pooled == nil || fg.Pooled.Innocents != 40 || len(fg.Tenants) > 5 || fg.Tenants[0].Label != "loud (pro, noisy)" {
		t.Fatalf("many-tenant run draws %d tenants (%+v), pooled %+v; want loud, the worst innocents and 40 pooled", len(fg.Tenants), fg.Tenants, fg.Pooled)
	}
	if got, want := fg.Tenants[1].Label, "t39 (starter, worst innocent)"; got != want {
		t.Errorf("first innocent drawn = %q, want %q: the lowest goodput", got, want)
	}
	if len(fg.Pooled.Series.P99) == 0 || fg.Pooled.Series.WindowS >= fg.Tenants[1].Series.WindowS {
		t.Errorf("pooled series %+v, want points over windows narrower than one tenant's", fg.Pooled.Series)
	}
	var bars []string
	for _, b := range p.Goodput.Bars {
		bars = append(bars, b.Label)
	}
	if want := []string{"lowest innocent", "median innocent", "noisy tenants together"}; !slices.Equal(bars, want) {
		t.Errorf("goodput bars %q, want %q", bars, want)
	}
	if low, noisy := p.Goodput.Bars[0], p.Goodput.Bars[2]; low.Pct[1] != 61 || noisy.Pct[1] != 2 || noisy.Ran[0] {
		t.Errorf("lowest innocent %v, noisy %v (ran %v); want 61 in fairgate, 2 in fairgate and no noisy baseline", low.Pct, noisy.Pct, noisy.Ran)
	}

	for _, res := range []*Results{few, many} {
		dir := t.TempDir()
		if err := writePlots(dir, res); err != nil {
			t.Fatal(err)
		}
		got, err := plotdata.Read(filepath.Join(dir, plotdata.FileName(res.Scenario)))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(res.plots(), got); diff != "" {
			t.Errorf("%s: plots file read back (-want +got):\n%s", res.Scenario, diff)
		}
	}
	dir := t.TempDir()
	if err := writePlots(dir, &Results{Scenario: "retry-storm"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, plotdata.FileName("retry-storm"))); !os.IsNotExist(err) {
		t.Errorf("a scenario without runs wrote a plots file (%v)", err)
	}
}

// Overload's own targets: critical calls sent get a 2xx (a call its client
// deferred was not sent), and the upstream stays busy from the peak on.
func TestCriticalAndPeakBusyTargets(t *testing.T) {
	a, loud := tl("a", "pro", Innocent), tl("loud", "pro", Noisy)
	critical := func(mode string, ok, refused, deferred int, peakBusy float64) run {
		r := synthRun(mode, []synthTenant{{tl: a, n: 10, ok: 10, lat: 10 * time.Millisecond}, {tl: loud, n: 1}})
		for range ok {
			r.samples = append(r.samples, sample{tenant: 1, crit: shed.Critical, outcome: OK, latency: time.Millisecond})
		}
		for range refused {
			r.samples = append(r.samples, sample{tenant: 1, crit: shed.Critical, outcome: Rejected503, latency: time.Millisecond})
		}
		for range deferred {
			r.samples = append(r.samples, sample{tenant: 1, crit: shed.Critical, outcome: Deferred})
		}
		r.peakBusy = peakBusy
		return r
	}
	res := &Results{Targets: Targets{MinGoodputPct: 99, MaxP99Ratio: 1.5, MinCriticalPct: 99.9, MinPeakBusyPct: 90}}
	res.add(synthRun("baseline", []synthTenant{{tl: a, n: 10, ok: 10, lat: 10 * time.Millisecond}}))
	res.add(critical("fairgate", 1000, 0, 30, 0.95))
	res.add(critical("refused", 998, 2, 0, 0.95))
	res.add(critical("idle", 1000, 0, 0, 0.6))
	if w := res.Worst[0]; !w.Met || w.CriticalPct != 100 || w.CriticalDeferred != 30 || w.PeakBusyPct != 95 {
		t.Errorf("all critical calls sent answered, 95%% busy: %+v, want the targets met with 30 deferred", w)
	}
	if w := res.Worst[1]; w.Met || w.CriticalPct != 99.8 {
		t.Errorf("2 of 1000 critical calls refused: %+v, want 99.8%% and the targets missed", w)
	}
	if w := res.Worst[2]; w.Met {
		t.Errorf("60%% busy from the peak on: %+v, want the targets missed", w)
	}
}

func TestPeakAt(t *testing.T) {
	s := Scenario{Tenants: []TenantLoad{
		{Role: Innocent, Ramp: &Ramp{Peak: 0.9}},
		{Role: Noisy, Ramp: &Ramp{Start: 0.1, Peak: 0.4}},
		{Role: Noisy},
	}}
	if got := s.peakAt(20 * time.Second); got != 8*time.Second {
		t.Errorf("peakAt = %v, want 8s: the noisy tenant's peak", got)
	}
	if got := (&Scenario{}).peakAt(time.Second); got != 0 {
		t.Errorf("peakAt without a ramp = %v, want 0", got)
	}
}
