package bench

import (
	"fmt"
	"slices"
	"time"

	"github.com/fairgate/fairgate/bench/plotdata"
)

// writePlots writes plots-SCENARIO.json to dir: the series that
// latency-SCENARIO.png (per run: admitted latency and rejection rate over
// time per tenant, the noisy ramp marked) and goodput-SCENARIO.png
// (goodput per tenant per mode) draw. The bench/plots command draws them;
// computing them here, from the raw samples only this process holds, keeps
// the plotting library out of the fairgate binary. Nothing is written
// without runs (retry-storm has no plots).
func writePlots(dir string, res *Results) error {
	if len(res.runs) == 0 {
		return nil
	}
	if err := plotdata.Write(dir, res.plots()); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	return nil
}

// plots computes what res's two plots draw; res has at least one run.
func (res *Results) plots() *plotdata.Plots {
	p := &plotdata.Plots{Scenario: res.Scenario, DurationS: res.DurationS,
		RampStartS: res.RampStartS, RampPeakS: res.RampPeakS, Goodput: res.goodput()}
	for _, r := range res.runs {
		p.Runs = append(p.Runs, res.latencyRow(r))
	}
	return p
}

// maxPlotInnocents is the most innocent tenants a plot draws one by one.
// Beyond it (many-tenants) a plot draws the noisy tenants, the worst few
// innocents and the innocents pooled as a band: a hundred lines are a
// smear.
const maxPlotInnocents = 6

// figuresOf returns res's per-tenant figures of mode.
func (res *Results) figuresOf(mode string) []TenantFigures {
	var out []TenantFigures
	for _, f := range res.Tenants {
		if f.Mode == mode {
			out = append(out, f)
		}
	}
	return out
}

// drawn returns the tenants of r a plot draws one by one, as indices into
// r.tenants, and whether it also draws the innocents pooled: every tenant
// when there are few, else the noisy ones and the two worst innocents by
// goodput and by p99 ratio.
func (res *Results) drawn(r run) (tenants []int, pooled bool) {
	figs := res.figuresOf(r.mode)
	innocents := 0
	for _, f := range figs {
		if f.Role == Innocent {
			innocents++
		}
	}
	if innocents <= maxPlotInnocents {
		for i := range r.tenants {
			tenants = append(tenants, i)
		}
		return tenants, false
	}
	shown, _ := worstRows(figs, 2)
	for _, f := range shown {
		if i := slices.IndexFunc(r.tenants, func(tl TenantLoad) bool { return tl.ID == f.Tenant }); i >= 0 {
			tenants = append(tenants, i)
		}
	}
	return tenants, true
}

// latencyRow is run r's row of the latency plot: the tenants drawn one by
// one, each over windows sized for one tenant's share of the samples, and,
// past maxPlotInnocents, the innocents pooled over windows sized for all of
// theirs.
func (res *Results) latencyRow(r run) plotdata.Run {
	row := plotdata.Run{Mode: r.mode, Ramp: res.RampPeakS > 0 && r.mode != "baseline"}
	tenants, pooled := res.drawn(r)
	if pooled {
		innocents := 0
		for _, tl := range r.tenants {
			if tl.Role == Innocent {
				innocents++
			}
		}
		in := func(i int) bool { return r.tenants[i].Role == Innocent }
		row.Pooled = &plotdata.Pooled{Innocents: innocents, Series: windowed(r, in, windowFor(r, innocents))}
	}
	for _, ti := range tenants {
		tl := r.tenants[ti]
		label := fmt.Sprintf("%s (%s, %s)", tl.ID, tl.Tier, tl.Role)
		if pooled && tl.Role == Innocent {
			label = fmt.Sprintf("%s (%s, worst innocent)", tl.ID, tl.Tier)
		}
		s := windowed(r, func(i int) bool { return i == ti }, windowFor(r, 1))
		row.Tenants = append(row.Tenants, plotdata.Tenant{ID: tl.ID, Label: label, Series: s})
	}
	return row
}

// windowFor returns the width of the time windows a series over tenants
// of r (n of them, for their share of r's samples) is cut into: a
// thirtieth of the run, at least half a second, and wide enough that a
// window holds about ten requests, so a light tenant's "p99" is not a
// single request.
func windowFor(r run, n int) time.Duration {
	w := max(r.dur/30, 500*time.Millisecond)
	if len(r.samples) == 0 || len(r.tenants) == 0 {
		return w
	}
	perTenant := float64(len(r.samples)) / float64(len(r.tenants)) * float64(n)
	if perTenant > 0 {
		w = max(w, time.Duration(10*float64(r.dur)/perTenant))
	}
	return min(w, max(r.dur/4, 500*time.Millisecond))
}

// windowed cuts the samples of the tenants for which in is true into
// windows of arrival time: per window, the p50 and p99 of the admitted
// requests (2xx and timeouts, as in the report) and the share of requests
// sent that were rejected. Deferred arrivals count in neither.
func windowed(r run, in func(tenant int) bool, window time.Duration) plotdata.Series {
	n := int(r.dur/window) + 1
	admitted := make([][]time.Duration, n)
	sent, rejected := make([]int, n), make([]int, n)
	for _, s := range r.samples {
		if !in(s.tenant) || s.outcome == Deferred {
			continue
		}
		i := min(int(s.at/window), n-1)
		sent[i]++
		switch s.outcome {
		case OK, TimedOut:
			admitted[i] = append(admitted[i], s.latency)
		case Rejected429, Rejected503:
			rejected[i]++
		}
	}
	// Empty, not nil: the file says [] for a series with no point.
	out := plotdata.Series{WindowS: window.Seconds(), P50: []plotdata.Point{}, P99: []plotdata.Point{}, Rejected: []plotdata.Point{}}
	for i := range n {
		x := min((time.Duration(i)*window + window/2).Seconds(), r.dur.Seconds())
		if sent[i] > 0 {
			out.Rejected = append(out.Rejected, plotdata.Point{S: x, V: 100 * float64(rejected[i]) / float64(sent[i])})
		}
		if b := admitted[i]; len(b) > 0 {
			slices.Sort(b)
			out.P50 = append(out.P50, plotdata.Point{S: x, V: max(percentile(b, 0.5), 1)})
			out.P99 = append(out.P99, plotdata.Point{S: x, V: max(percentile(b, 0.99), 1)})
		}
	}
	return out
}

// goodput is the goodput plot's bars, a value per run: a group per tenant,
// or, past maxPlotInnocents innocents, the lowest and the median innocent
// and the noisy tenants together.
func (res *Results) goodput() plotdata.Goodput {
	g := plotdata.Goodput{TargetPct: res.Targets.MinGoodputPct}
	for _, r := range res.runs {
		g.Modes = append(g.Modes, r.mode)
	}
	last := res.runs[len(res.runs)-1]
	if _, pooled := res.drawn(last); !pooled {
		for _, tl := range last.tenants {
			b := plotdata.Bars{Label: fmt.Sprintf("%s (%s, %s)", tl.ID, tl.Tier, tl.Role),
				Pct: make([]float64, len(g.Modes)), Ran: make([]bool, len(g.Modes))}
			for mi, m := range g.Modes {
				for _, f := range res.figuresOf(m) {
					if f.Tenant == tl.ID && f.Offered > 0 {
						b.Pct[mi], b.Ran[mi] = f.GoodputPct, true
					}
				}
			}
			g.Bars = append(g.Bars, b)
		}
		return g
	}
	low, med, noisy := plotdata.Bars{Label: "lowest innocent"}, plotdata.Bars{Label: "median innocent"}, plotdata.Bars{Label: "noisy tenants together"}
	for _, m := range g.Modes {
		figs := res.figuresOf(m)
		w := worstInnocent(figs, 1, Targets{})
		var ok, offered int
		for _, f := range figs {
			if f.Role == Noisy {
				ok, offered = ok+f.OK, offered+f.Offered
			}
		}
		low.Pct, low.Ran = append(low.Pct, w.GoodputPct), append(low.Ran, w.Innocents > 0)
		med.Pct, med.Ran = append(med.Pct, w.MedianGoodputPct), append(med.Ran, w.Innocents > 0)
		noisy.Pct, noisy.Ran = append(noisy.Pct, 100*float64(ok)/float64(max(offered, 1))), append(noisy.Ran, offered > 0)
	}
	g.Bars = []plotdata.Bars{low, med, noisy}
	return g
}
