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

// goodputPlot draws goodput per mode: a bar per group of p.Goodput (a
// tenant, or a summary of many). The axis stops at 100% (a little headroom
// above for the bars' tops) with the target marked.
func goodputPlot(path string, p *plotdata.Plots) error {
	g := p.Goodput
	if len(g.Modes) == 0 || len(g.Bars) == 0 {
		return errors.New("no bars")
	}
	pl := plot.New()
	pl.Title.Text = p.Scenario + ": goodput, % of arrivals answered 2xx"
	pl.Y.Label.Text = "goodput %"
	pl.Y.Min, pl.Y.Max = 0, 105
	pl.Y.Tick.Marker = percentTicks
	pl.Add(plotter.NewGrid())
	leg := newLegend()
	width := vg.Points(min(24, 120/float64(len(g.Bars))))
	for gi, b := range g.Bars {
		bars, err := plotter.NewBarChart(plotter.Values(b.Pct), width)
		if err != nil {
			return err
		}
		bars.Color = palette[gi%len(palette)]
		bars.LineStyle.Width = 0
		bars.Offset = width * vg.Length(float64(gi)-float64(len(g.Bars)-1)/2)
		pl.Add(bars)
		leg.Add(b.Label, bars)
		// The value above each bar: a bar at 0% is otherwise invisible.
		xyl := plotter.XYLabels{}
		for mi, v := range b.Pct {
			if !b.Ran[mi] {
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
		pl.Add(labels)
	}
	pl.NominalX(g.Modes...)
	pl.X.Min, pl.X.Max = -0.6, float64(len(g.Modes))-0.4
	if t := g.TargetPct; t > 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: pl.X.Min, Y: t}, {X: pl.X.Max, Y: t}})
		if err != nil {
			return err
		}
		l.Color, l.Dashes = color.Black, []vg.Length{vg.Points(4), vg.Points(3)}
		pl.Add(l)
		leg.Add(fmt.Sprintf("target: every innocent ≥ %g%%", t), l)
	}
	plotW := 6*vg.Centimeter + vg.Length(len(g.Modes))*4*vg.Centimeter
	img := vgimg.New(plotW+legendWidth, 10*vg.Centimeter)
	dc := draw.New(img)
	pl.Draw(draw.Crop(dc, 0, -legendWidth, 0, 0))
	lc := draw.Crop(dc, plotW+vg.Points(8), 0, 0, -vg.Points(20))
	leg.Draw(lc)
	return savePNG(path, img)
}
