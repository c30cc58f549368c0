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
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// writePlots writes latency-SCENARIO.png (p50 and p99 over time per
// tenant, one panel per run, the noisy ramp marked) and
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

// tenantIDs lists every tenant seen in res's runs, in scenario order.
func (res *Results) tenantIDs() []string {
	var ids []string
	for _, r := range res.runs {
		for _, tl := range r.tenants {
			if !slices.Contains(ids, tl.ID) {
				ids = append(ids, tl.ID)
			}
		}
	}
	return ids
}

func latencyPlot(path string, res *Results) error {
	ids := res.tenantIDs()
	var panels [][]*plot.Plot
	for _, r := range res.runs {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s — %s (solid p99, dashed p50)", res.Scenario, r.mode)
		p.X.Label.Text = "seconds since start (arrival time)"
		p.Y.Label.Text = "latency (ms, log)"
		p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		p.Legend.Top, p.Legend.Left = true, true
		p.Add(plotter.NewGrid())
		window := max(r.dur/30, 500*time.Millisecond)
		ymax := 1.0
		for ti, tl := range r.tenants {
			p50, p99 := series(r, ti, window)
			if len(p99) == 0 {
				continue
			}
			c := plotutil.Color(slices.Index(ids, tl.ID))
			for _, xy := range p99 {
				ymax = max(ymax, xy.Y)
			}
			l99, err := plotter.NewLine(p99)
			if err != nil {
				return err
			}
			l99.Color, l99.Width = c, vg.Points(1.5)
			l50, err := plotter.NewLine(p50)
			if err != nil {
				return err
			}
			l50.Color, l50.Dashes = c, []vg.Length{vg.Points(3), vg.Points(2)}
			p.Add(l99, l50)
			p.Legend.Add(fmt.Sprintf("%s (%s)", tl.ID, tl.Role), l99)
		}
		p.Y.Min, p.Y.Max = 1, ymax*1.5
		p.X.Min, p.X.Max = 0, res.DurationS
		if res.RampPeakS > 0 && r.mode != "baseline" {
			for _, x := range []float64{res.RampStartS, res.RampPeakS} {
				l, err := plotter.NewLine(plotter.XYs{{X: x, Y: 1}, {X: x, Y: ymax * 1.5}})
				if err != nil {
					return err
				}
				l.Color, l.Dashes = color.Gray{Y: 120}, []vg.Length{vg.Points(1), vg.Points(3)}
				p.Add(l)
			}
			p.Legend.Add(fmt.Sprintf("noisy ramp %.1f–%.1f s (dotted)", res.RampStartS, res.RampPeakS))
		}
		panels = append(panels, []*plot.Plot{p})
	}
	const w, rowH = 24 * vg.Centimeter, 9 * vg.Centimeter
	img := vgimg.New(w, rowH*vg.Length(len(panels)))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadX: vg.Points(4), PadY: vg.Points(8)}
	canvases := plot.Align(panels, tiles, dc)
	for i := range panels {
		panels[i][0].Draw(canvases[i][0])
	}
	return savePNG(path, img)
}

// series returns tenant ti's p50 and p99 latency (ms) per window of
// arrival time, for windows with samples sent.
func series(r run, ti int, window time.Duration) (p50, p99 plotter.XYs) {
	n := int(r.dur/window) + 1
	buckets := make([][]time.Duration, n)
	for _, s := range r.samples {
		if s.tenant != ti || s.outcome == Deferred {
			continue
		}
		i := min(int(s.at/window), n-1)
		buckets[i] = append(buckets[i], s.latency)
	}
	for i, b := range buckets {
		if len(b) == 0 {
			continue
		}
		slices.Sort(b)
		x := (time.Duration(i)*window + window/2).Seconds()
		p50 = append(p50, plotter.XY{X: x, Y: max(percentile(b, 0.5), 1)})
		p99 = append(p99, plotter.XY{X: x, Y: max(percentile(b, 0.99), 1)})
	}
	return p50, p99
}

func goodputPlot(path string, res *Results) error {
	ids := res.tenantIDs()
	p := plot.New()
	p.Title.Text = res.Scenario + ": goodput per tenant (2xx ÷ arrivals)"
	p.Y.Label.Text = "goodput %"
	p.Y.Min, p.Y.Max = 0, 130
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	var modes []string
	for _, r := range res.runs {
		modes = append(modes, r.mode)
	}
	width := vg.Points(100 / float64(len(ids)))
	for ti, id := range ids {
		vals := make(plotter.Values, len(res.runs))
		for ri, r := range res.runs {
			var offered, ok int
			for _, s := range r.samples {
				if r.tenants[s.tenant].ID != id {
					continue
				}
				offered++
				if s.outcome == OK {
					ok++
				}
			}
			if offered > 0 {
				vals[ri] = 100 * float64(ok) / float64(offered)
			}
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return err
		}
		bars.Color = plotutil.Color(ti)
		bars.LineStyle.Width = 0
		bars.Offset = width * vg.Length(float64(ti)-float64(len(ids)-1)/2)
		p.Add(bars)
		p.Legend.Add(id, bars)
	}
	p.NominalX(modes...)
	p.X.Min, p.X.Max = -0.6, float64(len(modes))-0.4
	img := vgimg.New(8*vg.Centimeter+vg.Length(len(modes))*4*vg.Centimeter, 10*vg.Centimeter)
	p.Draw(draw.New(img))
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
