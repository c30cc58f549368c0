package bench

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// writePlots writes latency-SCENARIO.png (per run: admitted latency and
// rejection rate over time per tenant, the noisy ramp marked) and
// goodput-SCENARIO.png (goodput per tenant per mode).
func writePlots(dir string, res *Results) error {
	if len(res.runs) == 0 {
		return nil
	}
	if err := latencyPlot(filepath.Join(dir, "latency-"+res.Scenario+".png"), res); err != nil {
		return fmt.Errorf("bench: latency plot: %w", err)
	}
	if err := goodputPlot(filepath.Join(dir, "goodput-"+res.Scenario+".png"), res); err != nil {
		return fmt.Errorf("bench: goodput plot: %w", err)
	}
	return nil
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

// Plot geometry: per run a row of two panels and a legend column.
const (
	rowHeight   = 8 * vg.Centimeter
	panelsWidth = 26 * vg.Centimeter
	legendWidth = 8 * vg.Centimeter
)

// latencyPlot draws, per run, the admitted latency (log scale) and the
// share of requests rejected, over arrival time, with the legend beside
// the panels rather than over the data.
func latencyPlot(path string, res *Results) error {
	var grid [][]*plot.Plot
	var legends []plot.Legend
	for _, r := range res.runs {
		lat, rej := plot.New(), plot.New()
		lat.Title.Text = fmt.Sprintf("%s — %s: admitted latency, p99 solid, p50 dashed", res.Scenario, r.mode)
		lat.Y.Label.Text = "ms (log)"
		lat.Y.Scale, lat.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		rej.Title.Text = fmt.Sprintf("%s — %s: rejected (429 and 503)", res.Scenario, r.mode)
		rej.Y.Label.Text = "% of requests sent"
		rej.Y.Min, rej.Y.Max = 0, 105
		rej.Y.Tick.Marker = percentTicks
		for _, p := range []*plot.Plot{lat, rej} {
			p.X.Label.Text = "seconds since start (arrival time)"
			p.X.Min, p.X.Max = 0, res.DurationS
			p.Add(plotter.NewGrid())
		}
		leg := newLegend()
		ymax := 10.0
		tenants, pooled := res.drawn(r)
		if pooled {
			y, err := addPooled(lat, rej, &leg, r)
			if err != nil {
				return err
			}
			ymax = max(ymax, y)
		}
		for k, ti := range tenants {
			label := fmt.Sprintf("%s (%s, %s)", r.tenants[ti].ID, r.tenants[ti].Tier, r.tenants[ti].Role)
			if pooled && r.tenants[ti].Role == Innocent {
				label = fmt.Sprintf("%s (%s, worst innocent)", r.tenants[ti].ID, r.tenants[ti].Tier)
			}
			y, err := addTenant(lat, rej, &leg, r, ti, label, palette[k%len(palette)])
			if err != nil {
				return err
			}
			ymax = max(ymax, y)
		}
		lat.Y.Min, lat.Y.Max = 1, ymax*1.5
		if res.RampPeakS > 0 && r.mode != "baseline" {
			for _, p := range []*plot.Plot{lat, rej} {
				if err := markRamp(p, res.RampStartS, res.RampPeakS); err != nil {
					return err
				}
			}
			leg.Add(fmt.Sprintf("noisy ramp %.1f–%.1f s (dotted)", res.RampStartS, res.RampPeakS))
		}
		grid = append(grid, []*plot.Plot{lat, rej})
		legends = append(legends, leg)
	}
	img := vgimg.New(panelsWidth+legendWidth, rowHeight*vg.Length(len(grid)))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(grid), Cols: 2, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadX: vg.Points(12), PadY: vg.Points(12)}
	canvases := plot.Align(grid, tiles, draw.Crop(dc, 0, -legendWidth, 0, 0))
	for i, row := range grid {
		row[0].Draw(canvases[i][0])
		row[1].Draw(canvases[i][1])
		lc := dc
		lc.Rectangle = vg.Rectangle{
			Min: vg.Point{X: canvases[i][1].Max.X + vg.Points(12), Y: canvases[i][1].Min.Y},
			Max: vg.Point{X: dc.Max.X, Y: canvases[i][1].Max.Y - vg.Points(20)},
		}
		legends[i].Draw(lc)
	}
	return savePNG(path, img)
}

// palette has ten colours that stay apart (Tableau 10): enough for five
// noisy tenants and the worst innocents of many-tenants.
var palette = []color.Color{
	color.RGBA{R: 0x4e, G: 0x79, B: 0xa7, A: 0xff}, color.RGBA{R: 0xf2, G: 0x8e, B: 0x2b, A: 0xff},
	color.RGBA{R: 0xe1, G: 0x57, B: 0x59, A: 0xff}, color.RGBA{R: 0x76, G: 0xb7, B: 0xb2, A: 0xff},
	color.RGBA{R: 0x59, G: 0xa1, B: 0x4f, A: 0xff}, color.RGBA{R: 0xed, G: 0xc9, B: 0x48, A: 0xff},
	color.RGBA{R: 0xb0, G: 0x7a, B: 0xa1, A: 0xff}, color.RGBA{R: 0xff, G: 0x9d, B: 0xa7, A: 0xff},
	color.RGBA{R: 0x9c, G: 0x75, B: 0x5f, A: 0xff}, color.RGBA{R: 0x33, G: 0x33, B: 0x33, A: 0xff},
}

// newLegend is a legend for a column beside the panels: top left, small.
func newLegend() plot.Legend {
	l := plot.NewLegend()
	l.Top, l.Left = true, true
	l.TextStyle.Font.Size = vg.Points(10)
	l.ThumbnailWidth = vg.Points(24)
	return l
}

// percentTicks marks 0 to 100 in steps of 20, whatever the axis' headroom.
var percentTicks = plot.ConstantTicks{{Value: 0, Label: "0"}, {Value: 20, Label: "20"}, {Value: 40, Label: "40"},
	{Value: 60, Label: "60"}, {Value: 80, Label: "80"}, {Value: 100, Label: "100"}}

// addTenant draws tenant ti's admitted p50 and p99 on lat and its rejected
// share on rej, in colour c, and returns the highest p99 drawn.
func addTenant(lat, rej *plot.Plot, leg *plot.Legend, r run, ti int, label string, c color.Color) (float64, error) {
	w := windowed(r, func(i int) bool { return i == ti }, windowFor(r, 1))
	l99, err := plotter.NewLine(w.p99)
	if err != nil {
		return 0, err
	}
	l99.Color, l99.Width = c, vg.Points(1.5)
	l50, err := plotter.NewLine(w.p50)
	if err != nil {
		return 0, err
	}
	l50.Color, l50.Dashes = c, []vg.Length{vg.Points(3), vg.Points(2)}
	lr, err := plotter.NewLine(w.rejected)
	if err != nil {
		return 0, err
	}
	lr.Color, lr.Width = c, vg.Points(1.5)
	if len(w.p99) > 0 {
		lat.Add(l99, l50)
	}
	if len(w.rejected) > 0 {
		rej.Add(lr)
	}
	leg.Add(label, l99)
	return w.maxP99, nil
}

// addPooled draws every innocent tenant of r pooled: a grey band from p50
// to p99 on lat and a grey line on rej. It is context for the worst
// innocents drawn one by one, never their verdict.
func addPooled(lat, rej *plot.Plot, leg *plot.Legend, r run) (float64, error) {
	innocents := 0
	for _, tl := range r.tenants {
		if tl.Role == Innocent {
			innocents++
		}
	}
	w := windowed(r, func(i int) bool { return r.tenants[i].Role == Innocent }, windowFor(r, innocents))
	grey := color.Gray{Y: 200}
	if len(w.p99) > 0 {
		band := slices.Clone(w.p99)
		for i := len(w.p50) - 1; i >= 0; i-- {
			band = append(band, w.p50[i])
		}
		poly, err := plotter.NewPolygon(band)
		if err != nil {
			return 0, err
		}
		poly.Color, poly.LineStyle.Width = grey, 0
		lat.Add(poly)
		leg.Add(fmt.Sprintf("all %d innocents pooled (band p50–p99)", innocents), poly)
	}
	lr, err := plotter.NewLine(w.rejected)
	if err != nil {
		return 0, err
	}
	lr.Color, lr.Width = color.Gray{Y: 140}, vg.Points(2.5)
	if len(w.rejected) > 0 {
		rej.Add(lr)
		leg.Add("all innocents pooled (rejected)", lr)
	}
	return w.maxP99, nil
}

// markRamp draws dotted vertical lines at the noisy ramp's start and peak.
func markRamp(p *plot.Plot, start, peak float64) error {
	lo, hi := p.Y.Min, p.Y.Max
	for _, x := range []float64{start, peak} {
		l, err := plotter.NewLine(plotter.XYs{{X: x, Y: lo}, {X: x, Y: hi}})
		if err != nil {
			return err
		}
		l.Color, l.Dashes = color.Gray{Y: 120}, []vg.Length{vg.Points(1), vg.Points(3)}
		p.Add(l)
	}
	return nil
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

// series is a windowed view of some tenants' samples.
type series struct {
	p50, p99 plotter.XYs // admitted latency, ms (at least 1, for the log axis)
	rejected plotter.XYs // % of requests sent
	maxP99   float64
}

// windowed cuts the samples of the tenants for which in is true into
// windows of arrival time: per window, the p50 and p99 of the admitted
// requests (2xx and timeouts, as in the report) and the share of requests
// sent that were rejected. Deferred arrivals count in neither.
func windowed(r run, in func(tenant int) bool, window time.Duration) series {
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
	var out series
	for i := range n {
		x := (time.Duration(i)*window + window/2).Seconds()
		if x > r.dur.Seconds() {
			x = r.dur.Seconds()
		}
		if sent[i] > 0 {
			out.rejected = append(out.rejected, plotter.XY{X: x, Y: 100 * float64(rejected[i]) / float64(sent[i])})
		}
		if b := admitted[i]; len(b) > 0 {
			slices.Sort(b)
			p99 := max(percentile(b, 0.99), 1)
			out.p50 = append(out.p50, plotter.XY{X: x, Y: max(percentile(b, 0.5), 1)})
			out.p99 = append(out.p99, plotter.XY{X: x, Y: p99})
			out.maxP99 = max(out.maxP99, p99)
		}
	}
	return out
}

// goodputPlot draws goodput per mode: a bar per tenant, or, past
// maxPlotInnocents innocents, the lowest and the median innocent and the
// noisy tenants together. The axis stops at 100% (a little headroom above
// for the bars' tops) with the 99% target marked.
func goodputPlot(path string, res *Results) error {
	var modes []string
	for _, r := range res.runs {
		modes = append(modes, r.mode)
	}
	type group struct {
		label string
		vals  plotter.Values // per mode
		has   []bool         // per mode: the tenant ran in it (noisy ones skip the baseline)
	}
	var groups []group
	if _, pooled := res.drawn(res.runs[len(res.runs)-1]); !pooled {
		for _, tl := range res.runs[len(res.runs)-1].tenants {
			g := group{label: fmt.Sprintf("%s (%s, %s)", tl.ID, tl.Tier, tl.Role), vals: make(plotter.Values, len(modes)), has: make([]bool, len(modes))}
			for mi, m := range modes {
				for _, f := range res.figuresOf(m) {
					if f.Tenant == tl.ID && f.Offered > 0 {
						g.vals[mi], g.has[mi] = f.GoodputPct, true
					}
				}
			}
			groups = append(groups, g)
		}
	} else {
		low, med, noisy := group{label: "lowest innocent"}, group{label: "median innocent"}, group{label: "noisy tenants together"}
		for _, m := range modes {
			figs := res.figuresOf(m)
			w := worstInnocent(figs, 1, Targets{})
			var ok, offered int
			for _, f := range figs {
				if f.Role == Noisy {
					ok, offered = ok+f.OK, offered+f.Offered
				}
			}
			low.vals, low.has = append(low.vals, w.GoodputPct), append(low.has, w.Innocents > 0)
			med.vals, med.has = append(med.vals, w.MedianGoodputPct), append(med.has, w.Innocents > 0)
			noisy.vals, noisy.has = append(noisy.vals, 100*float64(ok)/float64(max(offered, 1))), append(noisy.has, offered > 0)
		}
		groups = []group{low, med, noisy}
	}
	p := plot.New()
	p.Title.Text = res.Scenario + ": goodput, % of arrivals answered 2xx"
	p.Y.Label.Text = "goodput %"
	p.Y.Min, p.Y.Max = 0, 105
	p.Y.Tick.Marker = percentTicks
	p.Add(plotter.NewGrid())
	leg := newLegend()
	width := vg.Points(min(24, 120/float64(len(groups))))
	for gi, g := range groups {
		bars, err := plotter.NewBarChart(g.vals, width)
		if err != nil {
			return err
		}
		bars.Color = palette[gi%len(palette)]
		bars.LineStyle.Width = 0
		bars.Offset = width * vg.Length(float64(gi)-float64(len(groups)-1)/2)
		p.Add(bars)
		leg.Add(g.label, bars)
		// The value above each bar: a bar at 0% is otherwise invisible.
		xyl := plotter.XYLabels{}
		for mi, v := range g.vals {
			if !g.has[mi] {
				continue
			}
			xyl.XYs = append(xyl.XYs, plotter.XY{X: float64(mi), Y: v})
			xyl.Labels = append(xyl.Labels, fmt.Sprintf("%.0f", v))
		}
		labels, err := plotter.NewLabels(xyl)
		if err != nil {
			return err
		}
		for i := range labels.TextStyle {
			labels.TextStyle[i].Font.Size = vg.Points(7)
			labels.TextStyle[i].XAlign = draw.XCenter
		}
		labels.Offset = vg.Point{X: bars.Offset, Y: vg.Points(2)}
		p.Add(labels)
	}
	p.NominalX(modes...)
	p.X.Min, p.X.Max = -0.6, float64(len(modes))-0.4
	if t := res.Targets.MinGoodputPct; t > 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: t}, {X: p.X.Max, Y: t}})
		if err != nil {
			return err
		}
		l.Color, l.Dashes = color.Black, []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
		leg.Add(fmt.Sprintf("target: every innocent ≥ %g%%", t), l)
	}
	plotW := 6*vg.Centimeter + vg.Length(len(modes))*4*vg.Centimeter
	img := vgimg.New(plotW+legendWidth, 10*vg.Centimeter)
	dc := draw.New(img)
	p.Draw(draw.Crop(dc, 0, -legendWidth, 0, 0))
	lc := draw.Crop(dc, plotW+vg.Points(8), 0, 0, -vg.Points(20))
	leg.Draw(lc)
	return savePNG(path, img)
}

func savePNG(path string, img *vgimg.Canvas) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
