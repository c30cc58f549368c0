package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/fairgate/fairgate/internal/demoapi"
	"github.com/fairgate/fairgate/shed"
)

var discardLog = log.New(io.Discard, "", 0)

// Options configure Run.
type Options struct {
	// Scenario is a name from ScenarioNames.
	Scenario string
	// Modes run back to back after the baseline. Nil means DefaultModes.
	Modes []Mode
	// Duration is the arrival time of each mode's run. Zero means 30s.
	Duration time.Duration
	// Baseline is the arrival time of the quiet baseline. Zero means half
	// of Duration (all of it for the overhead scenario).
	Baseline time.Duration
	// Drain bounds the wait, after the last arrival, for requests still
	// open; they are then cancelled and counted as timeouts. Zero means
	// the scenario's longest client timeout.
	Drain time.Duration
	// RedisAddr is the Redis for the fairgate-redis mode. Empty skips that
	// mode.
	RedisAddr string
	// Progress receives a progress bar per run. Nil means none.
	Progress io.Writer
	// Log receives notes (a skipped mode). Nil discards them.
	Log io.Writer
	// Seed makes arrivals and mixes repeatable. Zero means 1.
	Seed uint64
}

// Results are one scenario's figures, as written to results.json.
type Results struct {
	Scenario    string   `json:"scenario"`
	Description string   `json:"description"`
	DurationS   float64  `json:"duration_s"`
	BaselineS   float64  `json:"baseline_s"`
	Modes       []string `json:"modes"`
	// Rows holds one row per mode (and "baseline"), tenant and
	// criticality.
	Rows []Row `json:"rows"`
	// Ramp marks the noisy tenants' ramp, in seconds from a run's start,
	// for the plots. Zero when the scenario has none.
	RampStartS float64 `json:"ramp_start_s,omitempty"`
	RampPeakS  float64 `json:"ramp_peak_s,omitempty"`

	runs []run // per mode, for the plots and the report's pooled figures
}

// Row is the figures of one mode, tenant and criticality. Percentiles are
// over every request sent, whatever became of it (a rejection is fast; a
// timeout counts as the client's timeout), in milliseconds.
type Row struct {
	Mode          string         `json:"mode"`
	Tenant        string         `json:"tenant"`
	Role          Role           `json:"role"`
	Criticality   string         `json:"criticality"`
	Sent          int            `json:"sent"`
	Deferred      int            `json:"deferred"`
	OK            int            `json:"ok"`
	Rejected429   int            `json:"rejected_429"`
	Rejected503   int            `json:"rejected_503"`
	Errors        int            `json:"errors"`
	Timeouts      int            `json:"timeouts"`
	RejectedBy    map[string]int `json:"rejected_by_layer,omitempty"`
	P50           float64        `json:"p50_ms"`
	P99           float64        `json:"p99_ms"`
	P999          float64        `json:"p999_ms"`
	BaselineP99   float64        `json:"baseline_p99_ms"`
	GoodputPct    float64        `json:"goodput_pct"`
	AdmittedPerS  float64        `json:"ok_per_s"`
	OfferedPerSec float64        `json:"offered_per_s"`
}

// run is one mode's samples.
type run struct {
	mode    string
	dur     time.Duration
	tenants []TenantLoad // samples' tenant indices point here
	samples []sample
}

// Run runs the scenario's quiet baseline, then each mode, and returns the
// results. Nothing is written; see WriteOutputs.
func Run(ctx context.Context, o Options) (*Results, error) {
	sc, err := Lookup(o.Scenario)
	if err != nil {
		return nil, err
	}
	o = o.withDefaults(&sc)
	if slices.Contains(o.Modes, FairgateRedis) && o.RedisAddr == "" {
		// Before anything runs: a run without the mode asked for would
		// end with an empty report and exit 0.
		return nil, errors.New("bench: mode fairgate-redis needs a Redis address (--redis host:port)")
	}
	res := &Results{Scenario: sc.Name, Description: sc.Description, DurationS: o.Duration.Seconds(), BaselineS: o.Baseline.Seconds()}
	for _, tl := range sc.Tenants {
		if tl.Ramp != nil && tl.Role == Noisy {
			res.RampStartS, res.RampPeakS = tl.Ramp.Start*o.Duration.Seconds(), tl.Ramp.Peak*o.Duration.Seconds()
		}
	}
	quiet := sc.innocentOnly()
	base, err := runOnce(ctx, &quiet, sc.Baseline, "baseline", o.Baseline, o)
	if err != nil {
		return nil, err
	}
	baseRows := rows(&quiet, base, nil)
	res.Rows = append(res.Rows, baseRows...)
	baseP99 := map[[2]string]float64{}
	for _, r := range baseRows {
		baseP99[[2]string{r.Tenant, r.Criticality}] = r.P99
	}
	res.runs = append(res.runs, base)
	for _, m := range o.Modes {
		r, err := runOnce(ctx, &sc, m, m.String(), o.Duration, o)
		if err != nil {
			return nil, fmt.Errorf("bench: %s/%s: %w", sc.Name, m, err)
		}
		res.Modes = append(res.Modes, m.String())
		res.Rows = append(res.Rows, rows(&sc, r, baseP99)...)
		res.runs = append(res.runs, r)
	}
	return res, ctx.Err()
}

func (o Options) withDefaults(sc *Scenario) Options {
	if o.Modes == nil {
		o.Modes = DefaultModes()
		if sc.DefaultModes != nil {
			o.Modes = sc.DefaultModes
		}
	}
	if o.Duration <= 0 {
		o.Duration = 30 * time.Second
	}
	if o.Baseline <= 0 {
		o.Baseline = o.Duration / 2
		if sc.Baseline != None {
			o.Baseline = o.Duration // the baseline is a comparison run
		}
	}
	if o.Drain <= 0 {
		for _, tl := range sc.Tenants {
			o.Drain = max(o.Drain, tl.Timeout)
		}
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Seed == 0 {
		o.Seed = 1
	}
	return o
}

// runOnce runs sc's load for dur against a fresh upstream behind mode m.
func runOnce(ctx context.Context, sc *Scenario, m Mode, label string, dur time.Duration, o Options) (run, error) {
	if err := ctx.Err(); err != nil {
		return run{}, err
	}
	up, err := serve(demoapi.New(sc.Upstream))
	if err != nil {
		return run{}, err
	}
	defer up.close()
	front, err := startFront(ctx, m, frontEnv{scenario: sc, upstream: up.url, redisAddr: o.RedisAddr})
	if err != nil {
		return run{}, err
	}
	defer front.close()
	if err := warmUp(ctx, front.url); err != nil {
		return run{}, err
	}
	l := newLoad(front.url, sc.Tenants, dur, o.Drain)
	defer l.close()
	stop := showProgress(o.Progress, sc.Name+"/"+label, dur, l)
	samples := l.run(ctx, o.Seed)
	stop()
	return run{mode: label, dur: dur, tenants: sc.Tenants, samples: samples}, nil
}

// warmUp waits until the front end answers (any status), so the first
// arrivals do not measure a listener starting.
func warmUp(ctx context.Context, base string) error {
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: (&net.Dialer{}).DialContext}}
	defer c.CloseIdleConnections()
	var err error
	for range 50 {
		var req *http.Request
		req, err = http.NewRequestWithContext(ctx, "GET", base+"/healthz-bench", nil)
		if err != nil {
			return err
		}
		var resp *http.Response
		if resp, err = c.Do(req); err == nil {
			resp.Body.Close()
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("bench: front end at %s does not answer: %w", base, err)
}

// showProgress draws a bar of the run's elapsed time to w until the
// returned func is called.
func showProgress(w io.Writer, desc string, dur time.Duration, l *load) (stop func()) {
	if w == nil {
		return func() {}
	}
	total := int64(dur / time.Millisecond)
	bar := progressbar.NewOptions64(total, progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(fmt.Sprintf("%-28s", desc)),
		progressbar.OptionSetWidth(30), progressbar.OptionThrottle(200*time.Millisecond), progressbar.OptionShowElapsedTimeOnFinish(),
		progressbar.OptionSetPredictTime(false))
	done := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(finished)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				el := int64(time.Since(start) / time.Millisecond)
				if el < total {
					bar.Describe(fmt.Sprintf("%-28s %6d sent", desc, l.sent.Load()))
				} else {
					bar.Describe(fmt.Sprintf("%-28s %6d open", desc+" draining", l.inFlight.Load()))
				}
				bar.Set64(min(el, total))
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		bar.Set64(total)
		bar.Finish()
		fmt.Fprintln(w)
	}
}

// rows summarises a run per tenant and criticality.
func rows(sc *Scenario, r run, baseP99 map[[2]string]float64) []Row {
	type key struct {
		tenant int
		crit   shed.Criticality
	}
	groups := map[key][]sample{}
	for _, s := range r.samples {
		k := key{s.tenant, s.crit}
		groups[k] = append(groups[k], s)
	}
	keys := make([]key, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if a.tenant != b.tenant {
			return a.tenant - b.tenant
		}
		return int(a.crit) - int(b.crit)
	})
	out := make([]Row, 0, len(keys))
	for _, k := range keys {
		tl := sc.Tenants[k.tenant]
		row := summarise(groups[k], r.dur)
		row.Mode, row.Tenant, row.Role, row.Criticality = r.mode, tl.ID, tl.Role, k.crit.String()
		if baseP99 != nil {
			row.BaselineP99 = baseP99[[2]string{tl.ID, row.Criticality}]
		} else {
			row.BaselineP99 = row.P99
		}
		out = append(out, row)
	}
	return out
}

// summarise counts outcomes and latency percentiles of samples from a run
// of duration dur.
func summarise(samples []sample, dur time.Duration) Row {
	var row Row
	lat := make([]time.Duration, 0, len(samples))
	for _, s := range samples {
		switch s.outcome {
		case Deferred:
			row.Deferred++
			continue
		case OK:
			row.OK++
		case Rejected429:
			row.Rejected429++
		case Rejected503:
			row.Rejected503++
		case Failed:
			row.Errors++
		case TimedOut:
			row.Timeouts++
		}
		if s.layer != "" {
			if row.RejectedBy == nil {
				row.RejectedBy = map[string]int{}
			}
			row.RejectedBy[s.layer]++
		}
		row.Sent++
		lat = append(lat, s.latency)
	}
	slices.Sort(lat)
	row.P50, row.P99, row.P999 = nan0(percentile(lat, 0.5)), nan0(percentile(lat, 0.99)), nan0(percentile(lat, 0.999))
	if offered := row.Sent + row.Deferred; offered > 0 {
		row.GoodputPct = 100 * float64(row.OK) / float64(offered)
		row.OfferedPerSec = float64(offered) / dur.Seconds()
	}
	row.AdmittedPerS = float64(row.OK) / dur.Seconds()
	return row
}
