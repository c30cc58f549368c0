package main

import (
	"image"
	"image/color"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/bench/plotdata"
)

// series is a rising latency and a falling rejected share over 10 s.
func series(base float64) plotdata.Series {
	s := plotdata.Series{WindowS: 1}
	for i := range 10 {
		x := float64(i) + 0.5
		s.P50 = append(s.P50, plotdata.Point{S: x, V: base + float64(i)})
		s.P99 = append(s.P99, plotdata.Point{S: x, V: 3*base + 10*float64(i)})
		s.Rejected = append(s.Rejected, plotdata.Point{S: x, V: 90 - 9*float64(i)})
	}
	return s
}

// fewAndMany are two scenarios' plots, one with every tenant drawn, one
// with the innocents pooled.
func fewAndMany() (few, many *plotdata.Plots) {
	few = &plotdata.Plots{Scenario: "few", DurationS: 10, RampStartS: 1, RampPeakS: 4,
		Runs: []plotdata.Run{
			{Mode: "baseline", Tenants: []plotdata.Tenant{{ID: "a", Label: "a (pro, innocent)", Series: series(10)}}},
			{Mode: "fairgate", Ramp: true, Tenants: []plotdata.Tenant{
				{ID: "a", Label: "a (pro, innocent)", Series: series(10)},
				{ID: "loud", Label: "loud (pro, noisy)", Series: series(100)},
			}},
		},
		Goodput: plotdata.Goodput{Modes: []string{"baseline", "fairgate"}, TargetPct: 99, Bars: []plotdata.Bars{
			{Label: "a (pro, innocent)", Pct: []float64{100, 100}, Ran: []bool{true, true}},
			{Label: "loud (pro, noisy)", Pct: []float64{0, 12}, Ran: []bool{false, true}},
		}},
	}
	many = &plotdata.Plots{Scenario: "many", DurationS: 10,
		Runs: []plotdata.Run{{Mode: "fairgate", Pooled: &plotdata.Pooled{Innocents: 40, Series: series(20)},
			Tenants: []plotdata.Tenant{{ID: "loud", Label: "loud (pro, noisy)", Series: series(100)},
				{ID: "t17", Label: "t17 (starter, worst innocent)", Series: plotdata.Series{WindowS: 1}}}}},
		Goodput: plotdata.Goodput{Modes: []string{"fairgate"}, Bars: []plotdata.Bars{
			{Label: "lowest innocent", Pct: []float64{61}, Ran: []bool{true}},
			{Label: "median innocent", Pct: []float64{100}, Ran: []bool{true}},
			{Label: "noisy tenants together", Pct: []float64{2}, Ran: []bool{true}},
		}},
	}
	return few, many
}

// readPNG decodes the PNG at path.
func readPNG(t *testing.T, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return img
}

// pixels counts img's pixels of colour c (within a small distance, for
// anti-aliasing).
func pixels(img image.Image, c color.Color) int {
	cr, cg, cb, _ := c.RGBA()
	near := func(a, b uint32) bool { return max(a, b)-min(a, b) < 0x0800 }
	n := 0
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			if near(r, cr) && near(g, cg) && near(b, cb) {
				n++
			}
		}
	}
	return n
}

// has says whether img has a line's worth of pixels of colour c: more
// than the anti-aliased edges of text and grid lines make by chance.
func has(img image.Image, c color.Color) bool { return pixels(img, c) > 200 }

// A bench --out directory of --scenario all (one directory per scenario)
// gets both PNGs beside each plots file: a latency row per run, each
// tenant in its palette colour, the pooled innocents as a grey band, a bar
// colour per group.
func TestRunDrawsEveryScenario(t *testing.T) {
	out := t.TempDir()
	few, many := fewAndMany()
	for _, p := range []*plotdata.Plots{few, many} {
		dir := filepath.Join(out, p.Scenario)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := plotdata.Write(dir, p); err != nil {
			t.Fatal(err)
		}
	}
	var stdout strings.Builder
	if err := run([]string{out}, &stdout); err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(stdout.String(), "wrote "); got != 4 {
		t.Errorf("stdout %q: %d PNGs written, want 4", stdout.String(), got)
	}
	fewLat := readPNG(t, filepath.Join(out, "few", plotdata.LatencyPNG("few")))
	manyLat := readPNG(t, filepath.Join(out, "many", plotdata.LatencyPNG("many")))
	if h, h1 := fewLat.Bounds().Dy(), manyLat.Bounds().Dy(); h < 2*h1-2 || h > 2*h1+2 {
		t.Errorf("latency heights %d (2 runs) and %d (1 run), want a row per run", h, h1)
	}
	for _, c := range palette[:2] {
		if !has(fewLat, c) {
			t.Errorf("few: latency plot has no tenant line in %v", c)
		}
	}
	if many, few := pixels(manyLat, color.Gray{Y: 200}), pixels(fewLat, color.Gray{Y: 200}); many < 5*max(few, 100) {
		t.Errorf("pooled band: %d grey pixels where pooled, %d where not; want a band only where pooled", many, few)
	}
	gp := readPNG(t, filepath.Join(out, "many", plotdata.GoodputPNG("many")))
	for _, c := range palette[:3] {
		if !has(gp, c) {
			t.Errorf("many: goodput plot has no bar in %v", c)
		}
	}
	// The plots file in the directory itself, as one scenario's --out is.
	if err := run([]string{filepath.Join(out, "few")}, &stdout); err != nil {
		t.Errorf("a scenario's own directory: %v", err)
	}
}

func TestRunRejects(t *testing.T) {
	empty := t.TempDir()
	bad := t.TempDir()
	few, _ := fewAndMany()
	few.Goodput.Bars[1].Ran = few.Goodput.Bars[1].Ran[:1]
	if err := plotdata.Write(bad, few); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{
		"no argument":         nil,
		"a flag":              {"-h"},
		"no plots file":       {empty},
		"no such directory":   {filepath.Join(empty, "nope")},
		"bars short of modes": {bad},
	} {
		if err := run(args, &strings.Builder{}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
