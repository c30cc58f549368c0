package bench

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fairgate/fairgate/bench/plotdata"
)

// WriteOutputs writes results.json, report.md and plots-SCENARIO.json (the
// series of the PNG plots that report.md links, which bench/plots draws)
// of res to dir, creating it.
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

// WriteReport writes res's tables in Markdown: the machine, each mode's
// worst innocent tenant, then each mode's figures per tenant.
func WriteReport(w io.Writer, res *Results) error {
	fmt.Fprintf(w, "## %s\n\n%s\n\n", res.Scenario, res.Description)
	fmt.Fprintf(w, "Machine: %s.\n\n", res.Machine)
	if res.Storm != nil {
		return writeStorm(w, res)
	}
	fmt.Fprintf(w, "Seed %d. Each mode ran %s of arrivals after a %s quiet baseline (innocent tenants alone, mode %s). "+
		"Goodput is 2xx ÷ arrivals (deferred ones included). Latency is of the requests not rejected (2xx, and timeouts at the client's timeout): "+
		"429s and 503s are fast and would make it look good, so they are counted apart. "+
		"p99 ÷ baseline divides a tenant's p99 by its own in the quiet baseline, over the same requests: "+
		"each tenant draws its arrivals, routes and the upstream's service times from its own seeded stream, the same in every run "+
		"(a p99 of a few dozen requests is their slowest, so that, not chance, decides which one it is).",
		res.Seed, secs(res.DurationS), secs(res.BaselineS), res.Baseline)
	if t := res.Targets; t.set() {
		fmt.Fprintf(w, " Targets for every innocent tenant: goodput ≥ %g%%, p99 ≤ %g× baseline", t.MinGoodputPct, t.MaxP99Ratio)
		if t.MinCriticalPct > 0 {
			fmt.Fprintf(w, "; critical calls sent, every tenant's: ≥ %g%% answered 2xx (a call a client deferred, honouring the Retry-After another of its calls got, was not sent)", t.MinCriticalPct)
		}
		if t.MinPeakBusyPct > 0 {
			fmt.Fprintf(w, "; upstream busy from the peak on ≥ %g%%", t.MinPeakBusyPct)
		}
		fmt.Fprint(w, "; none is the negative control and must miss them.")
	}
	fmt.Fprint(w, " Upstream busy is the share of the upstream's capacity (its connections × the arrivals' time) spent on calls served in full: the goodput of admitted work, not counting calls cut short for a client that left; in brackets, the same from the noisy tenants' peak to the end, under the whole overload.")
	fmt.Fprint(w, "\n\n")
	writeWorst(w, res)
	writeUsage(w, res)
	for _, mode := range append([]string{"baseline"}, res.Modes...) {
		writeTenants(w, res, mode)
	}
	if res.Scenario == "overhead" {
		writeOverhead(w, res)
	}
	_, err := fmt.Fprintf(w, "\n![latency](%s)\n\n![goodput](%s)\n", plotdata.LatencyPNG(res.Scenario), plotdata.GoodputPNG(res.Scenario))
	return err
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// writeWorst writes the headline table: per mode, the innocent tenant
// with the lowest goodput and the one with the highest p99 ratio.
func writeWorst(w io.Writer, res *Results) {
	fmt.Fprintln(w, "### Worst innocent tenant")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| mode | lowest goodput | highest p99 ÷ baseline | median innocent | noisy admitted / offered | upstream busy (from the peak) | critical goodput | targets |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---|")
	for _, x := range res.Worst {
		ratio := "—"
		if x.P99Tenant != "" {
			ratio = fmt.Sprintf("%.2f× (%s)", x.P99Ratio, x.P99Tenant)
		}
		noisy := "—"
		if x.NoisyOfferedPerS > 0 {
			noisy = fmt.Sprintf("%.1f / %.1f /s", x.NoisyOKPerS, x.NoisyOfferedPerS)
		}
		tenants := "tenants"
		if x.Innocents == 1 {
			tenants = "tenant"
		}
		busy := fmt.Sprintf("%.0f%%", x.UpstreamBusyPct)
		if x.PeakBusyPct > 0 {
			busy += fmt.Sprintf(" (%.0f%%)", x.PeakBusyPct)
		}
		crit := "—"
		if x.CriticalPct > 0 {
			crit = fmt.Sprintf("%.2f%% (%d deferred)", x.CriticalPct, x.CriticalDeferred)
		}
		fmt.Fprintf(w, "| %s | %.2f%% (%s) | %s | %.2f%% · %.2f× (%d %s) | %s | %s | %s | %s |\n",
			x.Mode, x.GoodputPct, x.GoodputTenant, ratio, x.MedianGoodputPct, x.MedianP99Ratio, x.Innocents, tenants,
			noisy, busy, crit, verdict(x, res.Targets))
	}
	fmt.Fprintln(w)
}

// writeUsage writes, for a scenario of completions, the noisy tenant's
// tokens served against its token quota in each mode.
func writeUsage(w io.Writer, res *Results) {
	if res.Targets.MaxUsageErrPct == 0 {
		return
	}
	fmt.Fprintf(w, "### Noisy tenant's tokens\n\nCompletion tokens served in full over the run against the tenant's quota (its rate × the run, plus its burst); target: within %g%%.\n\n", res.Targets.MaxUsageErrPct)
	fmt.Fprintln(w, "| mode | tenant | tokens served | quota | served ÷ quota |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|")
	for _, f := range res.Tenants {
		if f.Role == Noisy && f.TokenQuota > 0 {
			fmt.Fprintf(w, "| %s | %s | %d | %.0f | %.1f%% |\n", f.Mode, f.Tenant, f.Tokens, f.TokenQuota, f.UsagePct)
		}
	}
	fmt.Fprintln(w)
}

// verdict says whether x met the targets, and whether that is what its
// mode should do: none is the negative control.
func verdict(x Worst, t Targets) string {
	switch {
	case !t.set():
		return "—"
	case x.Mode == None.String() && x.Met:
		return "**met: the negative control should miss them; the scenario hurts no one**"
	case x.Mode == None.String():
		return "missed (negative control, as it should)"
	case x.Met:
		return "met"
	}
	return "**missed**"
}

// maxTenantRows bounds a mode's per-tenant table: beyond it the table lists
// the noisy tenants and the worst innocents, and sums up the rest
// (results.json has every row).
const maxTenantRows = 12

// writeTenants writes mode's per-tenant table.
func writeTenants(w io.Writer, res *Results, mode string) {
	var figs []TenantFigures
	for _, f := range res.Tenants {
		if f.Mode == mode {
			figs = append(figs, f)
		}
	}
	if len(figs) == 0 {
		return
	}
	shown, rest := figs, []TenantFigures(nil)
	if len(figs) > maxTenantRows {
		shown, rest = worstRows(figs, 5)
	}
	fmt.Fprintf(w, "### %s, per tenant\n\n", mode)
	fmt.Fprintln(w, "| tenant | tier | role | offered | goodput | rejected | timeouts | p99 | baseline p99 | p99 ÷ baseline | rejections by layer/reason |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
	for _, f := range shown {
		p99, ratio := "—", "—"
		if f.Admitted > 0 {
			p99 = fmt.Sprintf("%.1f ms (n=%d)", f.AdmittedP99, f.Admitted)
		}
		if f.P99Ratio > 0 {
			ratio = fmt.Sprintf("%.2f×", f.P99Ratio)
		}
		base := "—"
		if f.BaselineP99 > 0 {
			base = fmt.Sprintf("%.1f ms", f.BaselineP99)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %d | %.2f%% | %.2f%% | %d | %s | %s | %s | %s |\n",
			f.Tenant, f.Tier, f.Role, f.Offered, f.GoodputPct, f.RejectedPct, f.Timeouts, p99, base, ratio, layerList(f.ByReason))
	}
	if len(rest) > 0 {
		var goodputs, ratios []float64
		for _, f := range rest {
			goodputs = append(goodputs, f.GoodputPct)
			if f.P99Ratio > 0 {
				ratios = append(ratios, f.P99Ratio)
			}
		}
		fmt.Fprintf(w, "| … %d more innocent tenants | | | | median %.2f%% | | | | | median %.2f× | (all in results.json) |\n",
			len(rest), median(goodputs), median(ratios))
	}
	fmt.Fprintln(w)
}

// worstRows splits figs into what a long table shows — every noisy
// tenant, then the n innocents with the lowest goodput and the n with the
// highest p99 ratio, worst first — and the innocents it leaves out.
func worstRows(figs []TenantFigures, n int) (shown, rest []TenantFigures) {
	var noisy, inn []TenantFigures
	for _, f := range figs {
		if f.Role == Noisy {
			noisy = append(noisy, f)
		} else {
			inn = append(inn, f)
		}
	}
	byGoodput := slices.Clone(inn)
	slices.SortStableFunc(byGoodput, worstFirst)
	byRatio := slices.Clone(inn)
	slices.SortStableFunc(byRatio, func(a, b TenantFigures) int { return cmp.Compare(b.P99Ratio, a.P99Ratio) })
	pick := map[string]bool{}
	for _, f := range byGoodput[:min(n, len(byGoodput))] {
		pick[f.Tenant] = true
	}
	for _, f := range byRatio[:min(n, len(byRatio))] {
		pick[f.Tenant] = true
	}
	shown = noisy
	for _, f := range byGoodput {
		if pick[f.Tenant] {
			shown = append(shown, f)
		} else {
			rest = append(rest, f)
		}
	}
	return shown, rest
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

// layerList renders rejection counts, e.g. "bulkhead/queue_full 3, shed/shed 12".
func layerList(layers map[string]int) string {
	if len(layers) == 0 {
		return "—"
	}
	var parts []string
	for _, l := range slices.Sorted(maps.Keys(layers)) {
		parts = append(parts, fmt.Sprintf("%s %d", l, layers[l]))
	}
	return strings.Join(parts, ", ")
}
