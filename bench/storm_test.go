package bench

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRetryStorm runs a very short retry-storm and checks that every
// figure is computed; whether cooperating clients win is the benchmark's
// to report, not a unit test's to demand of a busy machine.
func TestRetryStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real load for seconds")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	modes := []Mode{None, Fairgate}
	res, err := Run(ctx, Options{Scenario: retryStorm, Modes: modes, Duration: 3 * time.Second, Drain: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Storm == nil || len(res.Storm.Runs) != 2*len(modes) {
		t.Fatalf("storm = %+v, want a run per mode and kind of client", res.Storm)
	}
	if res.Storm.OverloadFromS != 1 || res.Storm.OverloadToS != 2 {
		t.Errorf("overload %v–%v s, want the middle third, 1–2 s", res.Storm.OverloadFromS, res.Storm.OverloadToS)
	}
	for i, f := range res.Storm.Runs {
		t.Logf("%s/%s: offered %d, attempts %d, upstream %.0f·%.0f·%.0f/s, goodput %.1f%% (%.1f·%.1f·%.1f), recovery %v s",
			f.Mode, f.Clients, f.Offered, f.Attempts, f.UpstreamBeforePerS, f.UpstreamDuringPerS, f.UpstreamAfterPerS,
			f.GoodputPct, f.GoodputBeforePct, f.GoodputDuringPct, f.GoodputAfterPct, f.RecoveryS)
		if want := modes[i/2].String(); f.Mode != want || f.Clients != Retrier(i%2) {
			t.Errorf("run %d is %s/%s, want %s/%s", i, f.Mode, f.Clients, want, Retrier(i%2))
		}
		if f.Offered == 0 || f.Attempts < f.Offered || f.OK > f.Offered {
			t.Errorf("%s/%s: offered %d, ok %d, attempts %d", f.Mode, f.Clients, f.Offered, f.OK, f.Attempts)
		}
		if len(f.GoodputSeries) != 3 || len(f.UpstreamSeries) != 3 {
			t.Errorf("%s/%s: series of %d and %d seconds, want 3", f.Mode, f.Clients, len(f.GoodputSeries), len(f.UpstreamSeries))
		}
		if !(f.UpstreamBeforePerS > 0) || !(f.UpstreamPeakPerS >= f.UpstreamBeforePerS) {
			t.Errorf("%s/%s: upstream before %v/s, peak %v/s", f.Mode, f.Clients, f.UpstreamBeforePerS, f.UpstreamPeakPerS)
		}
		if f.RecoveryS != -1 && f.RecoveryS < 0 {
			t.Errorf("%s/%s: recovery %v s, want ≥ 0 or -1", f.Mode, f.Clients, f.RecoveryS)
		}
	}
	dir := t.TempDir()
	if err := WriteOutputs(dir, res); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Storm struct {
			Runs []map[string]any `json:"runs"`
		} `json:"retry_storm"`
	}
	if err := json.Unmarshal(b, &doc); err != nil || len(doc.Storm.Runs) != 4 {
		t.Fatalf("results.json: %d retry_storm runs (%v), want 4", len(doc.Storm.Runs), err)
	}
	for _, k := range []string{"mode", "clients", "goodput_pct", "goodput_during_pct", "upstream_during_per_s", "recovery_s"} {
		if _, ok := doc.Storm.Runs[0][k]; !ok {
			t.Errorf("retry_storm.runs[0] has no %q", k)
		}
	}
	report, err := os.ReadFile(filepath.Join(dir, "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## retry-storm", "| none | at-once |", "| fairgate | client |"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report.md has no %q:\n%s", want, report)
		}
	}
}

// TestStormFigures checks the arithmetic on a made-up run of 6 s: 10
// arrivals a second, all served within their second except during the
// overload (2–4 s), when half fail, and the second after it, when half are
// late by a second.
func TestStormFigures(t *testing.T) {
	var recs []logical
	for s := range 6 {
		for k := range 10 {
			at := time.Duration(s)*time.Second + time.Duration(k)*50*time.Millisecond
			r := logical{at: at, done: at + 10*time.Millisecond, ok: true, attempts: 1}
			switch {
			case s == 2 || s == 3:
				r.ok, r.attempts = k%2 == 0, 3
			case s == 4 && k%2 == 1:
				r.done += time.Second
			}
			recs = append(recs, r)
		}
	}
	up := []int64{10, 10, 30, 30, 10, 10, 0}
	f := stormFigures(recs, up, 6*time.Second)
	if f.Offered != 60 || f.OK != 50 || f.Attempts != 100 {
		t.Errorf("offered %d, ok %d, attempts %d; want 60, 50, 100", f.Offered, f.OK, f.Attempts)
	}
	if f.GoodputBeforePct != 100 || f.GoodputDuringPct != 50 || f.GoodputAfterPct != 100 {
		t.Errorf("goodput %v · %v · %v, want 100 · 50 · 100", f.GoodputBeforePct, f.GoodputDuringPct, f.GoodputAfterPct)
	}
	if want := []float64{100, 100, 50, 50, 50, 150}; !slices.Equal(f.GoodputSeries, want) {
		t.Errorf("goodput series %v, want %v", f.GoodputSeries, want)
	}
	if f.RecoveryS != 1 {
		t.Errorf("recovery %v s, want 1 (second 4 is at 50%%, second 5 back)", f.RecoveryS)
	}
	if f.UpstreamBeforePerS != 10 || f.UpstreamDuringPerS != 30 || f.UpstreamAfterPerS != 10 || f.UpstreamPeakPerS != 30 {
		t.Errorf("upstream %v · %v · %v (peak %v), want 10 · 30 · 10 (30)", f.UpstreamBeforePerS, f.UpstreamDuringPerS, f.UpstreamAfterPerS, f.UpstreamPeakPerS)
	}

	// Never back within the run.
	for i := range recs {
		if recs[i].at >= 4*time.Second {
			recs[i].ok = false
		}
	}
	if f := stormFigures(recs, up, 6*time.Second); f.RecoveryS != -1 {
		t.Errorf("recovery %v s, want -1 (not recovered)", f.RecoveryS)
	}
}
