// Package plotdata is the file that fairgate bench's plots are drawn from:
// per scenario, the windowed series of latency-SCENARIO.png and the bars of
// goodput-SCENARIO.png. Package bench computes them from a run's samples
// and writes plots-SCENARIO.json beside results.json; the bench/plots
// command reads the file and draws the PNGs.
//
// It is a package of its own, of plain types and the standard library
// alone, so that both sides share one definition of the format while the
// drawing command links neither the bench nor the gateway, and the
// fairgate binary links no plotting library.
package plotdata

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Plots is everything the two plots of one scenario draw.
type Plots struct {
	Scenario string `json:"scenario"`
	// DurationS is the arrival time of each run, in seconds: the latency
	// panels' time axis runs from 0 to it.
	DurationS float64 `json:"duration_s"`
	// RampStartS and RampPeakS are the noisy tenants' ramp, in seconds
	// from a run's start, marked on the runs whose Ramp is set. Zero when
	// the scenario has none.
	RampStartS float64 `json:"ramp_start_s,omitempty"`
	RampPeakS  float64 `json:"ramp_peak_s,omitempty"`
	// Runs are the latency plot's rows: the quiet baseline, then each
	// mode, in the order they ran.
	Runs    []Run   `json:"runs"`
	Goodput Goodput `json:"goodput"`
}

// Run is one run's row of the latency plot.
type Run struct {
	Mode string `json:"mode"`
	// Ramp says whether the noisy ramp is marked on this row: on every
	// run but the quiet baseline (which has no noisy tenants), when the
	// scenario has a ramp.
	Ramp bool `json:"ramp,omitempty"`
	// Pooled is every innocent tenant of the run together, set when there
	// are too many innocents to draw one by one: it is context for the
	// worst innocents in Tenants, never their verdict.
	Pooled *Pooled `json:"pooled,omitempty"`
	// Tenants are the tenants drawn one by one, in the order (and so the
	// colours) they are drawn: every tenant, or, beside Pooled, the noisy
	// tenants and the worst innocents.
	Tenants []Tenant `json:"tenants"`
}

// Tenant is one tenant's series.
type Tenant struct {
	ID string `json:"id"`
	// Label is the legend's text: the tenant, its tier and its role.
	Label  string `json:"label"`
	Series Series `json:"series"`
}

// Pooled is the series of a run's innocent tenants pooled.
type Pooled struct {
	Innocents int    `json:"innocents"`
	Series    Series `json:"series"`
}

// Series is a windowed view of some tenants' requests over their arrival
// time. Each point sits at its window's middle, the last one at the run's
// end at most; a window with nothing to show has no point.
type Series struct {
	// WindowS is the windows' width, in seconds.
	WindowS float64 `json:"window_s"`
	// P50 and P99 are the latency percentiles of the requests admitted
	// in a window (2xx and timeouts, as in the report), in ms and at
	// least 1 (the latency axis is logarithmic).
	P50 []Point `json:"admitted_p50_ms"`
	P99 []Point `json:"admitted_p99_ms"`
	// Rejected is the share of a window's requests sent that were
	// rejected (429 and 503), in percent. Arrivals the client deferred
	// count in neither series.
	Rejected []Point `json:"rejected_pct"`
}

// Point is one window of a Series.
type Point struct {
	// S is the window's middle, in seconds since the run's start.
	S float64 `json:"s"`
	// V is the window's value, in its series' unit.
	V float64 `json:"v"`
}

// Goodput is the goodput plot: per mode, a bar for each of Bars.
type Goodput struct {
	// Modes are the plot's categories, in run order, the quiet baseline
	// first.
	Modes []string `json:"modes"`
	// Bars are the groups of bars, in the order (and so the colours) they
	// are drawn: one per tenant, or, past a handful of innocents, the
	// lowest and the median innocent and the noisy tenants together.
	Bars []Bars `json:"bars"`
	// TargetPct is the goodput every innocent tenant must get, drawn as a
	// dashed line; zero when the scenario has no target.
	TargetPct float64 `json:"target_pct,omitempty"`
}

// Bars is one group's goodput in each mode.
type Bars struct {
	// Label is the legend's text.
	Label string `json:"label"`
	// Pct is the goodput per mode, in the order of Goodput.Modes: the
	// share of arrivals answered 2xx, in percent.
	Pct []float64 `json:"goodput_pct"`
	// Ran says per mode whether the group had arrivals there (noisy
	// tenants skip the baseline). A mode where it had none has a Pct of
	// 0, drawn with no value above it.
	Ran []bool `json:"ran"`
}

// FileName is the name of scenario's plots file, beside its results.json.
func FileName(scenario string) string { return "plots-" + scenario + ".json" }

// LatencyPNG is the name of scenario's latency plot, beside its plots
// file, where report.md links it.
func LatencyPNG(scenario string) string { return "latency-" + scenario + ".png" }

// GoodputPNG is the name of scenario's goodput plot, beside its plots
// file, where report.md links it.
func GoodputPNG(scenario string) string { return "goodput-" + scenario + ".png" }

// Write writes p to FileName(p.Scenario) in dir.
func Write(dir string, p *Plots) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("plotdata: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, FileName(p.Scenario)), append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("plotdata: %w", err)
	}
	return nil
}

// Read reads the plots file at path, and rejects one whose bars do not
// have a value per mode.
func Read(path string) (*Plots, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("plotdata: %w", err)
	}
	var p Plots
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("plotdata: %s: %w", path, err)
	}
	if p.Scenario == "" {
		return nil, fmt.Errorf("plotdata: %s: no scenario", path)
	}
	for i, g := range p.Goodput.Bars {
		if len(g.Pct) != len(p.Goodput.Modes) || len(g.Ran) != len(p.Goodput.Modes) {
			return nil, fmt.Errorf("plotdata: %s: goodput.bars[%d]: %d values and %d ran for %d modes",
				path, i, len(g.Pct), len(g.Ran), len(p.Goodput.Modes))
		}
	}
	return &p, nil
}
