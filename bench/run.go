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
	"sync/atomic"
	"time"

	"github.com/fairgate/fairgate/internal/demoapi"
	"github.com/fairgate/fairgate/shed"
)

var discardLog = log.New(io.Discard, "", 0)

// Options configure Run.
type Options struct {
	// Scenario is a name from ScenarioNames.
	Scenario string
	// Modes run back to back after the baseline. Nil means DefaultModes,
	// and FairgateRedis too when RedisAddr is set.
	Modes []Mode
	// Duration is the arrival time of each mode's run. Zero means 30s.
	Duration time.Duration
	// Baseline is the arrival time of the quiet baseline. Zero means
	// Duration: each innocent tenant then sends the same requests, with the
	// same service times, in the baseline as in each mode's run
	// (tenantStream), and its p99 is compared over the same requests.
	Baseline time.Duration
	// Drain bounds the wait, after the last arrival, for requests still
	// open; they are then cancelled and counted as timeouts. Zero means
	// the scenario's longest client timeout.
	Drain time.Duration
	// RedisAddr is the Redis for the fairgate-redis mode, which Run
	// refuses without it.
	RedisAddr string
	// Progress receives a progress line per run (a terminal: each redraw
	// overwrites the one before). Nil means none.
	Progress io.Writer
	// Seed makes arrivals and mixes repeatable. Zero means 1.
	Seed uint64
	// GCPercent is the Go collector's target the caller set for this
	// process, recorded in Results.Machine; zero means not recorded. Every
	// mode's front end, the upstream and the load share one process, so
	// the caller sets it once, as fairgate serve would
	// (gateway.ApplyGC): a gateway measured at Go's default of 100
	// collects four times as often as one that is served.
	GCPercent int
}

// Results are one scenario's figures, as written to results.json.
type Results struct {
	Scenario    string   `json:"scenario"`
	Description string   `json:"description"`
	DurationS   float64  `json:"duration_s"`
	BaselineS   float64  `json:"baseline_s"`
	Modes       []string `json:"modes"`
	// Baseline is the quiet baseline's mode: none (the plain proxy), or
	// direct for the overhead scenario.
	Baseline string  `json:"baseline_mode"`
	Seed     uint64  `json:"seed"`
	Machine  Machine `json:"machine"`
	// Targets are what every innocent tenant must get in a protected mode
	// (and must not get in none, the negative control).
	Targets Targets `json:"targets"`
	// Worst holds each mode's worst innocent tenant, in run order.
	Worst []Worst `json:"worst_innocent"`
	// Tenants holds one entry per mode (and "baseline") and tenant, all
	// criticalities together.
	Tenants []TenantFigures `json:"tenants"`
	// Rows holds one row per mode (and "baseline"), tenant and
	// criticality.
	Rows []Row `json:"rows"`
	// Ramp marks the noisy tenants' ramp, in seconds from a run's start,
	// for the plots. Zero when the scenario has none.
	RampStartS float64 `json:"ramp_start_s,omitempty"`
	RampPeakS  float64 `json:"ramp_peak_s,omitempty"`
	// Storm holds retry-storm's figures, which compare clients rather
	// than front ends; that scenario has no tenant rows.
	Storm *Storm `json:"retry_storm,omitempty"`

	runs []run              // baseline first, then per mode, for the plots
	base map[string]float64 // per tenant, ms, from runs[0]
}

// Row is the figures of one mode, tenant and criticality, latencies in
// milliseconds. P50, P99 and P999 are over every request sent, whatever
// became of it (a rejection is fast; a timeout counts as the client's
// timeout); AdmittedP50 and AdmittedP99 only over those not rejected (2xx
// and timeouts), so fast rejections cannot make latency look good.
// BaselineP99 is the admitted p99 of the same tenant and criticality in the
// quiet baseline.
type Row struct {
	Mode        string         `json:"mode"`
	Tenant      string         `json:"tenant"`
	Role        Role           `json:"role"`
	Criticality string         `json:"criticality"`
	Sent        int            `json:"sent"`
	Deferred    int            `json:"deferred"`
	OK          int            `json:"ok"`
	Rejected429 int            `json:"rejected_429"`
	Rejected503 int            `json:"rejected_503"`
	Errors      int            `json:"errors"`
	Timeouts    int            `json:"timeouts"`
	RejectedBy  map[string]int `json:"rejected_by_layer,omitempty"`
	// ByReason counts rejections by "layer/reason" ("rate/tenant_quota",
	// "rate/global_backstop"): one layer gives 429s and 503s for
	// different causes.
	ByReason      map[string]int `json:"rejected_by_reason,omitempty"`
	P50           float64        `json:"p50_ms"`
	P99           float64        `json:"p99_ms"`
	P999          float64        `json:"p999_ms"`
	Admitted      int            `json:"admitted"`
	AdmittedP50   float64        `json:"admitted_p50_ms"`
	AdmittedP99   float64        `json:"admitted_p99_ms"`
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
	// busy is the share of the upstream's connection time spent on calls
	// served in full during the arrivals; peakBusy the same from the
	// noisy tenants' peak to the end of the arrivals (0 without a ramp).
	busy, peakBusy float64
}

// Run runs the scenario's quiet baseline, then each mode, and returns the
// results. Nothing is written; see WriteOutputs.
func Run(ctx context.Context, o Options) (*Results, error) {
	if o.Seed == 0 {
		o.Seed = 1
	}
	sc, err := Lookup(o.Scenario, o.Seed)
	if err != nil {
		return nil, err
	}
	o = o.withDefaults(&sc)
	if sc.Name == retryStorm {
		return runStorm(ctx, &sc, o)
	}
	if slices.Contains(o.Modes, FairgateRedis) && o.RedisAddr == "" {
		return nil, errors.New("bench: mode fairgate-redis needs a Redis address (--redis HOST:PORT)")
	}
	res := &Results{Scenario: sc.Name, Description: sc.Description, DurationS: o.Duration.Seconds(), BaselineS: o.Baseline.Seconds(),
		Baseline: sc.Baseline.String(), Seed: o.Seed, Machine: machineNow(o.GCPercent), Targets: sc.Targets}
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
	res.add(base)
	for _, m := range o.Modes {
		r, err := runOnce(ctx, &sc, m, m.String(), o.Duration, o)
		if err != nil {
			return nil, fmt.Errorf("bench: %s/%s: %w", sc.Name, m, err)
		}
		res.add(r)
	}
	res.Machine.LoadEnd = loadAverage()
	return res, ctx.Err()
}

// add appends run r's figures to res. The first run added is the quiet
// baseline, which the later runs' p99s are divided by.
func (res *Results) add(r run) {
	var baseRow map[[2]string]float64 // tenant, criticality → admitted p99
	if len(res.runs) == 0 {
		res.base = baselines(r)
	} else {
		baseRow = map[[2]string]float64{}
		for _, row := range res.Rows {
			if row.Mode == res.runs[0].mode {
				baseRow[[2]string{row.Tenant, row.Criticality}] = row.AdmittedP99
			}
		}
	}
	res.runs = append(res.runs, r)
	runRows := rows(r, baseRow)
	res.Rows = append(res.Rows, runRows...)
	figs := tenantFigures(r, res.base)
	res.Tenants = append(res.Tenants, figs...)
	if len(res.runs) > 1 {
		res.Modes = append(res.Modes, r.mode)
		w := worstInnocent(figs, r.dur.Seconds(), res.Targets)
		w.UpstreamBusyPct, w.PeakBusyPct = 100*r.busy, 100*r.peakBusy
		w.CriticalPct, w.CriticalDeferred = criticalGoodput(runRows)
		w.Met = w.Met && (res.Targets.MinCriticalPct == 0 || w.CriticalPct >= res.Targets.MinCriticalPct) &&
			(res.Targets.MinPeakBusyPct == 0 || w.PeakBusyPct >= res.Targets.MinPeakBusyPct)
		res.Worst = append(res.Worst, w)
	}
}

func (o Options) withDefaults(sc *Scenario) Options {
	if o.Modes == nil {
		o.Modes = DefaultModes()
		if sc.DefaultModes != nil {
			o.Modes = sc.DefaultModes
		}
		if o.RedisAddr != "" && !slices.Contains(o.Modes, FairgateRedis) {
			o.Modes = append(slices.Clone(o.Modes), FairgateRedis)
		}
	}
	if o.Duration <= 0 {
		o.Duration = 30 * time.Second
	}
	if o.Baseline <= 0 {
		o.Baseline = o.Duration
	}
	if o.Drain <= 0 {
		for _, tl := range sc.Tenants {
			o.Drain = max(o.Drain, tl.Timeout)
		}
	}
	return o
}

// runOnce runs sc's load for dur against a fresh upstream behind mode m.
func runOnce(ctx context.Context, sc *Scenario, m Mode, label string, dur time.Duration, o Options) (run, error) {
	if err := ctx.Err(); err != nil {
		return run{}, err
	}
	api := demoapi.New(sc.Upstream)
	up, err := serve(api)
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
	peakAt := sc.peakAt(dur)
	busy0 := api.Stats().Busy
	var busy, atPeak atomic.Int64
	t := time.AfterFunc(dur, func() { busy.Store(int64(api.Stats().Busy - busy0)) })
	tp := time.AfterFunc(peakAt, func() { atPeak.Store(int64(api.Stats().Busy - busy0)) })
	samples := l.run(ctx, o.Seed)
	// A run whose last requests ended before its arrival time was over
	// (every late one refused at once) stops before the timers fire:
	// the upstream's work is then all done, and counted now.
	if t.Stop() {
		busy.Store(int64(api.Stats().Busy - busy0))
	}
	if tp.Stop() {
		atPeak.Store(int64(api.Stats().Busy - busy0))
	}
	stop()
	r := run{mode: label, dur: dur, tenants: sc.Tenants, samples: samples,
		busy: float64(busy.Load()) / (float64(api.Connections()) * float64(dur))}
	if peakAt > 0 && peakAt < dur {
		r.peakBusy = float64(busy.Load()-atPeak.Load()) / (float64(api.Connections()) * float64(dur-peakAt))
	}
	return r, nil
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

// rows summarises a run per tenant and criticality. baseP99 maps a tenant
// and criticality to its admitted p99 in the quiet baseline; nil for the
// baseline itself.
func rows(r run, baseP99 map[[2]string]float64) []Row {
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
		tl := r.tenants[k.tenant]
		row := summarise(groups[k], r.dur)
		row.Mode, row.Tenant, row.Role, row.Criticality = r.mode, tl.ID, tl.Role, k.crit.String()
		if baseP99 != nil {
			row.BaselineP99 = baseP99[[2]string{tl.ID, row.Criticality}]
		} else {
			row.BaselineP99 = row.AdmittedP99
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
	var admitted []time.Duration
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
			if row.ByReason == nil {
				row.ByReason = map[string]int{}
			}
			key := s.layer
			if s.reason != "" {
				key += "/" + s.reason
			}
			row.ByReason[key]++
		}
		row.Sent++
		lat = append(lat, s.latency)
		if s.outcome == OK || s.outcome == TimedOut {
			admitted = append(admitted, s.latency)
		}
	}
	slices.Sort(lat)
	row.P50, row.P99, row.P999 = nan0(percentile(lat, 0.5)), nan0(percentile(lat, 0.99)), nan0(percentile(lat, 0.999))
	slices.Sort(admitted)
	row.Admitted = len(admitted)
	row.AdmittedP50, row.AdmittedP99 = nan0(percentile(admitted, 0.5)), nan0(percentile(admitted, 0.99))
	if offered := row.Sent + row.Deferred; offered > 0 {
		row.GoodputPct = 100 * float64(row.OK) / float64(offered)
		row.OfferedPerSec = float64(offered) / dur.Seconds()
	}
	row.AdmittedPerS = float64(row.OK) / dur.Seconds()
	return row
}
