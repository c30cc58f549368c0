package bench

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// stormFigures computes a run's figures from its logical requests and the
// upstream's requests per second, the overload being the middle third of
// dur. Attempts are the records' (RetryClient's are set by the caller).
func stormFigures(recs []logical, upstream []int64, dur time.Duration) StormFigures {
	var f StormFigures
	from, to := dur/3, 2*dur/3
	secs := int(dur / time.Second)
	arrived, completed := make([]int, secs), make([]int, secs)
	var phaseOK, phaseN [3]int
	for _, r := range recs {
		f.Offered++
		f.Attempts += r.attempts
		p := phase(r.at, from, to)
		phaseN[p]++
		if s := int(r.at / time.Second); s < secs {
			arrived[s]++
		}
		if !r.ok {
			continue
		}
		f.OK++
		phaseOK[p]++
		if s := int(r.done / time.Second); s < secs {
			completed[s]++
		}
	}
	f.GoodputPct = pct(f.OK, f.Offered)
	f.GoodputBeforePct, f.GoodputDuringPct, f.GoodputAfterPct = pct(phaseOK[0], phaseN[0]), pct(phaseOK[1], phaseN[1]), pct(phaseOK[2], phaseN[2])

	f.GoodputSeries = make([]float64, secs)
	var pre []float64
	for s := range secs {
		f.GoodputSeries[s] = pct(completed[s], arrived[s])
		// Second 0 warms up the connections; use it only when it is all
		// there is before the overload.
		if end := time.Duration(s+1) * time.Second; end <= from && (s > 0 || from < 2*time.Second) {
			pre = append(pre, f.GoodputSeries[s])
		}
	}
	f.RecoveryS = -1
	if len(pre) > 0 {
		level := stormRecovered * mean(pre)
		first := int(math.Ceil(to.Seconds()))
		for s := first; s < secs; s++ {
			if f.GoodputSeries[s] >= level {
				f.RecoveryS = float64(s) - to.Seconds()
				break
			}
		}
	}

	f.UpstreamSeries = upstream[:min(secs, len(upstream))]
	var upN [3]int64
	for s, n := range f.UpstreamSeries {
		upN[phase(time.Duration(s)*time.Second, from, to)] += n
		f.UpstreamPeakPerS = max(f.UpstreamPeakPerS, float64(n))
	}
	f.UpstreamBeforePerS = float64(upN[0]) / from.Seconds()
	f.UpstreamDuringPerS = float64(upN[1]) / (to - from).Seconds()
	f.UpstreamAfterPerS = float64(upN[2]) / (dur - to).Seconds()
	return f
}

// phase returns 0, 1 or 2 for a time before, during or after [from, to).
func phase(at, from, to time.Duration) int {
	switch {
	case at < from:
		return 0
	case at < to:
		return 1
	}
	return 2
}

// pct returns 100 × n ÷ d, 0 when d is 0.
func pct(n, d int) float64 {
	if d == 0 {
		return 0
	}
	return 100 * float64(n) / float64(d)
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// writeStorm writes retry-storm's report after WriteReport's heading.
func writeStorm(w io.Writer, res *Results) error {
	st := res.Storm
	fmt.Fprintf(w, "Seed %d. Each run lasted %s of arrivals, the overload from %s to %s. "+
		"Goodput is logical requests (all attempts of one arrival) that ended in a 2xx ÷ those offered, by the phase they arrived in. "+
		"Upstream load counts every request reaching the upstream, 503s it shed included. "+
		"Recovery is the time from the overload's end to the end of the first whole second whose goodput (successes completed in it ÷ arrivals in it) is back to %g%% of the mean before the overload, "+
		"so its resolution is one second (“< 1 s”: the first second after the overload is back); “not recovered” means no second of the run got there. "+
		"The per-second series below show what the totals hide: a backlog of retries completing after the overload shows as goodput above 100%%.\n\n",
		res.Seed, secs(res.DurationS), secs(st.OverloadFromS), secs(st.OverloadToS), 100*stormRecovered)
	fmt.Fprintln(w, "| mode | clients | offered/s | attempts per request | upstream req/s before · during · after (peak) | goodput | before · during · after | recovery |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|")
	for _, f := range st.Runs {
		rec := "not recovered"
		switch {
		case f.RecoveryS == 0:
			rec = "< 1 s"
		case f.RecoveryS > 0:
			rec = fmt.Sprintf("%.1f–%.1f s", f.RecoveryS, f.RecoveryS+1)
		}
		per := 0.0
		if f.Offered > 0 {
			per = float64(f.Attempts) / float64(f.Offered)
		}
		fmt.Fprintf(w, "| %s | %s | %.0f | %.2f | %.0f · %.0f · %.0f (%.0f) | %.1f%% | %.1f%% · %.1f%% · %.1f%% | %s |\n",
			f.Mode, f.Clients, float64(f.Offered)/res.DurationS, per, f.UpstreamBeforePerS, f.UpstreamDuringPerS, f.UpstreamAfterPerS,
			f.UpstreamPeakPerS, f.GoodputPct, f.GoodputBeforePct, f.GoodputDuringPct, f.GoodputAfterPct, rec)
	}
	fmt.Fprintln(w, "\nPer second (goodput % / upstream requests):")
	fmt.Fprintln(w)
	for _, f := range st.Runs {
		parts := make([]string, len(f.GoodputSeries))
		for s, g := range f.GoodputSeries {
			parts[s] = fmt.Sprintf("%.0f/%d", g, f.UpstreamSeries[min(s, len(f.UpstreamSeries)-1)])
		}
		fmt.Fprintf(w, "- %s, %s: %s\n", f.Mode, f.Clients, strings.Join(parts, " "))
	}
	_, err := fmt.Fprintln(w)
	return err
}
