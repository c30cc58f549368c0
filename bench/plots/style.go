package main

import (
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/vgimg"
)

// Plot geometry: per run a row of two panels and a legend column.
const (
	rowHeight   = 8 * vg.Centimeter
	panelsWidth = 26 * vg.Centimeter
	legendWidth = 8 * vg.Centimeter
)

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
