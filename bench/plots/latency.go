package main

import (
	"errors"
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/fairgate/fairgate/bench/plotdata"
)

// latencyPlot draws, per run, the admitted latency (log scale) and the
// share of requests rejected, over arrival time, with the legend beside
// the panels rather than over the data.
func latencyPlot(path string, p *plotdata.Plots) error {
	if len(p.Runs) == 0 {
		return errors.New("no runs")
	}
	var grid [][]*plot.Plot
	var legends []plot.Legend
	for _, r := range p.Runs {
		lat, rej := plot.New(), plot.New()
		lat.Title.Text = fmt.Sprintf("%s — %s: admitted latency, p99 solid, p50 dashed", p.Scenario, r.Mode)
		lat.Y.Label.Text = "ms (log)"
		lat.Y.Scale, lat.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		rej.Title.Text = fmt.Sprintf("%s — %s: rejected (429 and 503)", p.Scenario, r.Mode)
		rej.Y.Label.Text = "% of requests sent"
		rej.Y.Min, rej.Y.Max = 0, 105
		rej.Y.Tick.Marker = percentTicks
		for _, pl := range []*plot.Plot{lat, rej} {
			pl.X.Label.Text = "seconds since start (arrival time)"
			pl.X.Min, pl.X.Max = 0, p.DurationS
			pl.Add(plotter.NewGrid())
		}
		leg := newLegend()
		ymax := 10.0
		if r.Pooled != nil {
			if err := addPooled(lat, rej, &leg, r.Pooled); err != nil {
				return err
			}
			ymax = max(ymax, maxV(r.Pooled.Series.P99))
		}
		for k, t := range r.Tenants {
			if err := addTenant(lat, rej, &leg, t, palette[k%len(palette)]); err != nil {
				return err
			}
			ymax = max(ymax, maxV(t.Series.P99))
		}
		lat.Y.Min, lat.Y.Max = 1, ymax*1.5
		if r.Ramp && p.RampPeakS > 0 {
			for _, pl := range []*plot.Plot{lat, rej} {
				if err := markRamp(pl, p.RampStartS, p.RampPeakS); err != nil {
					return err
				}
			}
			leg.Add(fmt.Sprintf("noisy ramp %.1f–%.1f s (dotted)", p.RampStartS, p.RampPeakS))
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

// xys converts a series' points to gonum's.
func xys(ps []plotdata.Point) plotter.XYs {
	out := make(plotter.XYs, len(ps))
	for i, pt := range ps {
		out[i] = plotter.XY{X: pt.S, Y: pt.V}
	}
	return out
}

// maxV is the highest value of ps, 0 when it is empty.
func maxV(ps []plotdata.Point) float64 {
	m := 0.0
	for _, pt := range ps {
		m = max(m, pt.V)
	}
	return m
}

// addTenant draws t's admitted p50 and p99 on lat and its rejected share
// on rej, in colour c.
func addTenant(lat, rej *plot.Plot, leg *plot.Legend, t plotdata.Tenant, c color.Color) error {
	l99, err := plotter.NewLine(xys(t.Series.P99))
	if err != nil {
		return err
	}
	l99.Color, l99.Width = c, vg.Points(1.5)
	l50, err := plotter.NewLine(xys(t.Series.P50))
	if err != nil {
		return err
	}
	l50.Color, l50.Dashes = c, []vg.Length{vg.Points(3), vg.Points(2)}
	lr, err := plotter.NewLine(xys(t.Series.Rejected))
	if err != nil {
		return err
	}
	lr.Color, lr.Width = c, vg.Points(1.5)
	if len(t.Series.P99) > 0 {
		lat.Add(l99, l50)
	}
	if len(t.Series.Rejected) > 0 {
		rej.Add(lr)
	}
	leg.Add(t.Label, l99)
	return nil
}

// addPooled draws the innocents pooled: a grey band from p50 to p99 on
// lat and a grey line on rej. It is context for the worst innocents drawn
// one by one, never their verdict.
func addPooled(lat, rej *plot.Plot, leg *plot.Legend, pooled *plotdata.Pooled) error {
	s := pooled.Series
	grey := color.Gray{Y: 200}
	if len(s.P99) > 0 {
		band := xys(s.P99)
		p50 := xys(s.P50)
		for i := len(p50) - 1; i >= 0; i-- {
			band = append(band, p50[i])
		}
		poly, err := plotter.NewPolygon(band)
		if err != nil {
			return err
		}
		poly.Color, poly.LineStyle.Width = grey, 0
		lat.Add(poly)
		leg.Add(fmt.Sprintf("all %d innocents pooled (band p50–p99)", pooled.Innocents), poly)
	}
	lr, err := plotter.NewLine(xys(s.Rejected))
	if err != nil {
		return err
	}
	lr.Color, lr.Width = color.Gray{Y: 140}, vg.Points(2.5)
	if len(s.Rejected) > 0 {
		rej.Add(lr)
		leg.Add("all innocents pooled (rejected)", lr)
	}
	return nil
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
