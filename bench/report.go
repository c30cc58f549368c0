package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// WriteOutputs writes results.json, report.md and the PNG plots of res to
// dir, creating it.
func WriteOutputs(dir string, res *Results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "report.md"))
	if err != nil {
		return err
	}
	if err := WriteReport(f, res); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return writePlots(dir, res)
}

// summary is one mode's line in the report: innocent tenants pooled.
type summary struct {
	mode                 string
	innocentP99, baseP99 float64 // ms, pooled over innocent tenants
	goodput              float64 // %, innocent ok ÷ offered
	innocentTimeouts     int
	noisyOK, noisyOffer  float64           // per second
	layers               map[string][2]int // layer → {all, innocent}
}

// summaries pools each run's innocent and noisy samples.
func (res *Results) summaries() []summary {
	var out []summary
	var base float64
	for i, r := range res.runs {
		s := summary{mode: r.mode, layers: map[string][2]int{}}
		var inn []sample
		var noisyOK, noisyOffer int
		for _, x := range r.samples {
			role := r.tenants[x.tenant].Role
			if x.layer != "" {
				c := s.layers[x.layer]
				c[0]++
				if role == Innocent {
					c[1]++
				}
				s.layers[x.layer] = c
			}
			if role == Innocent {
				inn = append(inn, x)
				continue
			}
			noisyOffer++
			if x.outcome == OK {
				noisyOK++
			}
		}
		row := summarise(inn, r.dur)
		s.innocentP99, s.goodput, s.innocentTimeouts = row.P99, row.GoodputPct, row.Timeouts
		s.noisyOK, s.noisyOffer = float64(noisyOK)/r.dur.Seconds(), float64(noisyOffer)/r.dur.Seconds()
		if i == 0 {
			base = row.P99
		}
		s.baseP99 = base
		out = append(out, s)
	}
	return out
}

// WriteReport writes res's table in Markdown.
func WriteReport(w io.Writer, res *Results) error {
	fmt.Fprintf(w, "## %s\n\n%s\n\n", res.Scenario, res.Description)
	fmt.Fprintf(w, "Each mode ran %s of arrivals after a %s quiet baseline (innocent tenants alone, plain proxy). "+
		"Innocent figures pool every innocent tenant; p99 is over every request sent (a timeout counts as the client's timeout); "+
		"goodput is 2xx ÷ arrivals (deferred ones included).\n\n",
		time.Duration(res.DurationS*float64(time.Second)), time.Duration(res.BaselineS*float64(time.Second)))
	fmt.Fprintln(w, "| mode | innocent p99 ÷ baseline | innocent p99 | innocent goodput | innocent timeouts | noisy admitted | noisy offered | rejections by layer (innocent's share) |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---|")
	for _, s := range res.summaries() {
		fmt.Fprintf(w, "| %s | %.2f× | %.1f ms | %.2f%% | %d | %.1f/s | %.1f/s | %s |\n",
			s.mode, s.innocentP99/s.baseP99, s.innocentP99, s.goodput, s.innocentTimeouts, s.noisyOK, s.noisyOffer, layerList(s.layers))
	}
	if res.Scenario == "overhead" {
		writeOverhead(w, res)
	}
	_, err := fmt.Fprintf(w, "\n![latency](latency-%[1]s.png)\n\n![goodput](goodput-%[1]s.png)\n", res.Scenario)
	return err
}

// writeOverhead adds the overhead scenario's table: each proxy's added
// latency over the direct baseline.
func writeOverhead(w io.Writer, res *Results) {
	var base Row
	fmt.Fprintln(w, "\n| path | p50 | p99 | p99.9 | added p50 | added p99 | errors |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|")
	for _, r := range res.Rows {
		if r.Mode == "baseline" {
			base = r
			r.Mode = "direct (baseline)"
		}
		fmt.Fprintf(w, "| %s | %.3f ms | %.3f ms | %.3f ms | %+.3f ms | %+.3f ms | %d |\n",
			r.Mode, r.P50, r.P99, r.P999, r.P50-base.P50, r.P99-base.P99, r.Errors+r.Timeouts+r.Rejected429+r.Rejected503)
	}
}

func layerList(layers map[string][2]int) string {
	if len(layers) == 0 {
		return "—"
	}
	var parts []string
	for _, l := range slices.Sorted(maps.Keys(layers)) {
		c := layers[l]
		parts = append(parts, fmt.Sprintf("%s %d (%d)", l, c[0], c[1]))
	}
	return strings.Join(parts, ", ")
}
