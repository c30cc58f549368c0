package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// WriteThroughput writes rows as a Markdown table, then each round's
// ratios: fairgate's proxied req/s over the bare proxy's and direct's.
func WriteThroughput(w io.Writer, res ThroughputResult) error {
	rows := res.Rows
	var b strings.Builder
	b.WriteString("| round | conns | mode | 200/s | 429/s | p50 ms | p99 ms | server CPU µs/answer | server core busy | upstream CPU µs/answer | load gen CPU µs/answer | errors |\n")
	b.WriteString("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	byKey := map[[2]int]map[string]ThroughputRow{}
	for _, r := range rows {
		if r.Skipped != "" {
			fmt.Fprintf(&b, "| %d | %d | %s | skipped: %s |||||||||\n", r.Round, r.Conns, r.Mode, r.Skipped)
			continue
		}
		fmt.Fprintf(&b, "| %d | %d | %s | %.0f | %.0f | %.2f | %.2f | %.1f | %.0f%% | %.1f | %.1f | %d |\n", r.Round, r.Conns, r.Mode,
			r.OK, r.Rejected, r.P50, r.P99, r.ServerCPU, r.ServerBusy*100, r.UpstreamCPU, r.LoadCPU, r.Errors)
		k := [2]int{r.Round, r.Conns}
		if byKey[k] == nil {
			byKey[k] = map[string]ThroughputRow{}
		}
		byKey[k][r.Mode] = r
	}
	// A row of ratios per fairgate variant that ran: the default, the
	// net/http engine, and the collector at Go's default target.
	b.WriteString("\n| round | conns | fairgate mode | ÷ reverseproxy (200/s) | ÷ direct (200/s) | ÷ nginx (200/s) | CPU per 200 ÷ nginx's | CPU µs per 200 − reverseproxy's | ÷ nginx (429/s) | CPU per 429 ÷ nginx's | CPU per 200 ÷ fairgate's | CPU per 429 ÷ fairgate's |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	keys := slices.Collect(func(yield func([2]int) bool) {
		for k := range byKey {
			if !yield(k) {
				return
			}
		}
	})
	slices.SortFunc(keys, func(a, b [2]int) int { return a[0]*1e6 + a[1] - b[0]*1e6 - b[1] })
	for _, k := range keys {
		m := byKey[k]
		rp, d, ng, ngRej := m["reverseproxy"], m["direct"], m["nginx"], m["nginx-429"]
		base, baseRej := m["fairgate"], m["fairgate-429"]
		for _, v := range []string{"fairgate", "fairgate-fasthttp", "fairgate-gc100"} {
			fg, fgRej := m[v], m[v+"-429"]
			if fg.ServerCPU == 0 && fgRej.ServerCPU == 0 && v != "fairgate" {
				continue
			}
			vsBase, vsBaseRej := "—", "—"
			if v != "fairgate" {
				vsBase, vsBaseRej = ratio(fg.ServerCPU, base.ServerCPU), ratio(fgRej.ServerCPU, baseRej.ServerCPU)
			}
			fmt.Fprintf(&b, "| %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", k[0], k[1], v,
				ratio(fg.OK, rp.OK), ratio(fg.OK, d.OK), ratio(fg.OK, ng.OK), ratio(fg.ServerCPU, ng.ServerCPU),
				diff(fg.ServerCPU, rp.ServerCPU), ratio(fgRej.Rejected, ngRej.Rejected), ratio(fgRej.ServerCPU, ngRej.ServerCPU),
				vsBase, vsBaseRej)
		}
	}
	if len(res.Floods) > 0 {
		b.WriteString("\n")
	}
	if _, err := io.WriteString(w, b.String()); err != nil || len(res.Floods) == 0 {
		return err
	}
	return WriteFlood(w, res.Floods)
}

func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

func diff(a, b float64) string {
	if a == 0 || b == 0 {
		return "—"
	}
	return fmt.Sprintf("%+.1f", a-b)
}
