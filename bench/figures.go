package bench

import (
	"cmp"
	"math"
	"slices"
	"time"

	"github.com/fairgate/fairgate/shed"
)

// Targets are what every innocent tenant of a scenario must get in a
// protected mode. The none mode is the scenario's negative control: it
// must miss them, or the scenario does not hurt anyone.
type Targets struct {
	// MinGoodputPct is the lowest acceptable goodput, in percent.
	MinGoodputPct float64 `json:"min_goodput_pct" yaml:"min_goodput_pct"`
	// MaxP99Ratio is the highest acceptable admitted p99 ÷ the tenant's
	// own quiet-baseline p99.
	MaxP99Ratio float64 `json:"max_p99_ratio" yaml:"max_p99_ratio"`
	// MinCriticalPct is the lowest acceptable share of the critical calls
	// sent, every tenant's together, that get a 2xx (0 judges nothing).
	MinCriticalPct float64 `json:"min_critical_pct,omitempty" yaml:"min_critical_pct"`
	// MinPeakBusyPct is the lowest acceptable upstream busy from the
	// noisy tenants' peak on: under total overload, admitted goodput as a
	// share of the upstream's capacity (0 judges nothing).
	MinPeakBusyPct float64 `json:"min_peak_busy_pct,omitempty" yaml:"min_peak_busy_pct"`
	// MaxUsageErrPct bounds how far a noisy tenant's completion tokens
	// served may be from its token quota over the run, in percent either
	// way (0 judges nothing): usage-based cost holds a tenant to its
	// quota of what it used, neither more nor, while it asks for more,
	// much less.
	MaxUsageErrPct float64 `json:"max_usage_err_pct,omitempty" yaml:"max_usage_err_pct"`
}

// set reports whether t judges anything (the overhead scenario has no
// targets).
func (t Targets) set() bool { return t.MinGoodputPct > 0 || t.MaxP99Ratio > 0 }

// defaultTargets are the isolation targets: an innocent tenant
// keeps 99% of its requests and its p99 stays within 1.2× its baseline.
var defaultTargets = Targets{MinGoodputPct: 99, MaxP99Ratio: 1.2}

// TenantFigures are one tenant's figures in one run, all criticalities
// together.
type TenantFigures struct {
	Mode   string `json:"mode"`
	Tenant string `json:"tenant"`
	Tier   string `json:"tier"`
	Role   Role   `json:"role"`
	// Offered counts arrivals: requests sent and those the client
	// deferred, honouring a Retry-After.
	Offered  int `json:"offered"`
	OK       int `json:"ok"`
	Rejected int `json:"rejected"` // 429 and 503
	Deferred int `json:"deferred"`
	Timeouts int `json:"timeouts"`
	Errors   int `json:"errors"`
	// RejectedBy counts rejections by the layer that refused them, and
	// ByReason by "layer/reason" (see Row).
	RejectedBy map[string]int `json:"rejected_by_layer,omitempty"`
	ByReason   map[string]int `json:"rejected_by_reason,omitempty"`
	// GoodputPct is OK ÷ Offered and RejectedPct Rejected ÷ Offered, in
	// percent; 0 without arrivals.
	GoodputPct  float64 `json:"goodput_pct"`
	RejectedPct float64 `json:"rejected_pct"`
	// AdmittedP99 is the p99 latency (ms) of the requests not rejected:
	// 2xx, and timeouts at the client's timeout (a queue that makes
	// clients give up must not look fast). Rejections are fast and would
	// make latency look good; they are counted in Rejected instead.
	// Admitted is the number of samples behind it; 0 means none and
	// AdmittedP99 is 0.
	AdmittedP99 float64 `json:"admitted_p99_ms"`
	Admitted    int     `json:"admitted"`
	// BaselineP99 is the tenant's AdmittedP99 in the quiet baseline, and
	// P99Ratio AdmittedP99 ÷ BaselineP99; both 0 where either is missing
	// (a noisy tenant has no baseline). See baselines.
	BaselineP99 float64 `json:"baseline_admitted_p99_ms,omitempty"`
	P99Ratio    float64 `json:"p99_ratio,omitempty"`
	// Tokens is the completion tokens the tenant was served in full (its
	// 2xx answers' Call.Tokens), and TokenQuota what its contract lets it
	// use over the run: its rate × the run, plus its burst (0 without a
	// contract or completions). UsagePct is Tokens ÷ TokenQuota.
	Tokens     int     `json:"tokens,omitempty"`
	TokenQuota float64 `json:"token_quota,omitempty"`
	UsagePct   float64 `json:"usage_pct,omitempty"`
}

// baselines returns each tenant's baseline from the quiet baseline run r,
// in ms: its own admitted p99. The baseline runs as long as each mode's run, and
// a tenant draws its arrivals, routes and service times from its own
// stream (tenantStream), so that its p99 is over the same requests in
// both: with a few dozen requests a tenant's p99 is its slowest, and
// which request drew the slowest service time is then the same in both
// runs instead of a lottery that no gateway can win.
func baselines(r run) map[string]float64 {
	own := make([][]time.Duration, len(r.tenants))
	for _, s := range r.samples {
		if s.outcome == OK || s.outcome == TimedOut {
			own[s.tenant] = append(own[s.tenant], s.latency)
		}
	}
	out := make(map[string]float64, len(r.tenants))
	for i, tl := range r.tenants {
		if len(own[i]) > 0 {
			slices.Sort(own[i])
			out[tl.ID] = percentile(own[i], 0.99)
		}
	}
	return out
}

// tenantFigures summarises run r per tenant, in scenario order, dividing
// each tenant's p99 by its baseline in base.
func tenantFigures(r run, base map[string]float64) []TenantFigures {
	groups := make([][]sample, len(r.tenants))
	for _, s := range r.samples {
		groups[s.tenant] = append(groups[s.tenant], s)
	}
	out := make([]TenantFigures, 0, len(r.tenants))
	for i, tl := range r.tenants {
		row := summarise(groups[i], r.dur)
		f := TenantFigures{Mode: r.mode, Tenant: tl.ID, Tier: tl.Tier, Role: tl.Role,
			Offered: row.Sent + row.Deferred, OK: row.OK, Rejected: row.Rejected429 + row.Rejected503,
			Deferred: row.Deferred, Timeouts: row.Timeouts, Errors: row.Errors, RejectedBy: row.RejectedBy, ByReason: row.ByReason,
			GoodputPct: row.GoodputPct, AdmittedP99: row.AdmittedP99, Admitted: row.Admitted}
		if f.Offered > 0 {
			f.RejectedPct = 100 * float64(f.Rejected) / float64(f.Offered)
		}
		for _, s := range groups[i] {
			if s.outcome == OK {
				f.Tokens += s.tokens
			}
		}
		if c := tl.Contract; c != nil && f.Tokens > 0 {
			f.TokenQuota = c.Rate*r.dur.Seconds() + c.Burst
			f.UsagePct = 100 * float64(f.Tokens) / f.TokenQuota
		}
		f.BaselineP99 = base[tl.ID]
		if f.Admitted > 0 && f.BaselineP99 > 0 {
			f.P99Ratio = f.AdmittedP99 / f.BaselineP99
		}
		out = append(out, f)
	}
	return out
}

// Worst is a mode's headline: its worst innocent tenant by goodput and,
// separately, by p99 ratio — never an average over innocents, which hides
// exactly the tenant who suffers.
type Worst struct {
	Mode string `json:"mode"`
	// Innocents is the number of innocent tenants with arrivals.
	Innocents int `json:"innocents"`
	// GoodputTenant had the lowest goodput, GoodputPct.
	GoodputTenant string  `json:"lowest_goodput_tenant"`
	GoodputPct    float64 `json:"lowest_goodput_pct"`
	// P99Tenant had the highest admitted p99 ÷ its baseline p99,
	// P99Ratio. Tenants with nothing admitted have no ratio; their
	// goodput (0) is the headline then.
	P99Tenant string  `json:"highest_p99_ratio_tenant,omitempty"`
	P99Ratio  float64 `json:"highest_p99_ratio,omitempty"`
	// MedianGoodputPct and MedianP99Ratio are the median innocent's, for
	// scale: many tenants fine and one starved is another story than all
	// of them a little worse.
	MedianGoodputPct float64 `json:"median_goodput_pct"`
	MedianP99Ratio   float64 `json:"median_p99_ratio,omitempty"`
	// NoisyOKPerS and NoisyOfferedPerS are the noisy tenants' admitted and
	// offered requests per second, together.
	NoisyOKPerS      float64 `json:"noisy_ok_per_s"`
	NoisyOfferedPerS float64 `json:"noisy_offered_per_s"`
	// UpstreamBusyPct is the share of the upstream's capacity (its
	// connections × the arrivals' time) spent on calls served in full:
	// the goodput of admitted work. Work cut short for a client that left
	// is not counted.
	UpstreamBusyPct float64 `json:"upstream_busy_pct"`
	// PeakBusyPct is UpstreamBusyPct from the noisy tenants' peak to the
	// end of the arrivals: the upstream's use under the whole overload.
	PeakBusyPct float64 `json:"peak_busy_pct,omitempty"`
	// CriticalPct is the share of the critical calls sent, every
	// tenant's, that got a 2xx; CriticalDeferred counts those their
	// clients held back, honouring a Retry-After another call got.
	CriticalPct      float64 `json:"critical_pct,omitempty"`
	CriticalDeferred int     `json:"critical_deferred,omitempty"`
	// UsageTenant is the noisy tenant whose tokens served were furthest
	// from its token quota, UsagePct its tokens ÷ quota (0 without
	// completions).
	UsageTenant string  `json:"usage_tenant,omitempty"`
	UsagePct    float64 `json:"usage_pct,omitempty"`
	// Met reports whether every innocent tenant met the scenario's
	// targets (false when the scenario has none), and every noisy
	// tenant's usage its MaxUsageErrPct.
	Met bool `json:"met_targets"`
}

// worstInnocent returns the headline of one run's figures, lasting dur.
// Ties go to the tenant listed first.
func worstInnocent(figs []TenantFigures, dur float64, t Targets) Worst {
	var w Worst
	var goodputs, ratios []float64
	var noisyOK, noisyOffered int
	w.GoodputPct, w.P99Ratio = math.Inf(1), math.Inf(-1)
	for _, f := range figs {
		w.Mode = f.Mode
		if f.Role == Noisy {
			noisyOK += f.OK
			noisyOffered += f.Offered
			if f.TokenQuota > 0 && (w.UsageTenant == "" || math.Abs(f.UsagePct-100) > math.Abs(w.UsagePct-100)) {
				w.UsageTenant, w.UsagePct = f.Tenant, f.UsagePct
			}
			continue
		}
		if f.Offered == 0 {
			continue
		}
		w.Innocents++
		goodputs = append(goodputs, f.GoodputPct)
		if f.GoodputPct < w.GoodputPct {
			w.GoodputTenant, w.GoodputPct = f.Tenant, f.GoodputPct
		}
		if f.P99Ratio > 0 {
			ratios = append(ratios, f.P99Ratio)
			if f.P99Ratio > w.P99Ratio {
				w.P99Tenant, w.P99Ratio = f.Tenant, f.P99Ratio
			}
		}
	}
	if w.Innocents == 0 {
		w.GoodputPct = 0
	}
	if w.P99Tenant == "" {
		w.P99Ratio = 0
	}
	w.MedianGoodputPct, w.MedianP99Ratio = median(goodputs), median(ratios)
	if dur > 0 {
		w.NoisyOKPerS, w.NoisyOfferedPerS = float64(noisyOK)/dur, float64(noisyOffered)/dur
	}
	w.Met = t.set() && w.Innocents > 0 &&
		(t.MinGoodputPct == 0 || w.GoodputPct >= t.MinGoodputPct) &&
		(t.MaxP99Ratio == 0 || w.P99Ratio <= t.MaxP99Ratio) &&
		(t.MaxUsageErrPct == 0 || w.UsageTenant != "" && math.Abs(w.UsagePct-100) <= t.MaxUsageErrPct)
	return w
}

// worstFirst orders innocent figures from worst to best: lowest goodput
// first, then highest p99 ratio.
func worstFirst(a, b TenantFigures) int {
	return cmp.Or(cmp.Compare(a.GoodputPct, b.GoodputPct), cmp.Compare(b.P99Ratio, a.P99Ratio))
}

// median returns the median of xs (the mean of the middle two for an even
// count), or 0 for none. It sorts xs.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// peakAt is when, in arrivals of dur, the last noisy tenant's ramp
// reaches its peak; 0 when no noisy tenant ramps.
func (s *Scenario) peakAt(dur time.Duration) time.Duration {
	var at time.Duration
	for _, tl := range s.Tenants {
		if tl.Ramp != nil && tl.Role == Noisy {
			at = max(at, time.Duration(tl.Ramp.Peak*float64(dur)))
		}
	}
	return at
}

// criticalGoodput is the share of the critical calls sent, every
// tenant's, that got a 2xx — the shedder's promise, which holds for the
// noisy tenants too — and how many more their clients did not send,
// honouring a Retry-After another of the user's calls got. pct is 0 when
// rs has no critical calls.
func criticalGoodput(rs []Row) (pct float64, deferred int) {
	var ok, sent int
	for _, r := range rs {
		if r.Criticality == shed.Critical.String() {
			ok += r.OK
			sent += r.Sent
			deferred += r.Deferred
		}
	}
	if sent == 0 {
		return 0, deferred
	}
	return 100 * float64(ok) / float64(sent), deferred
}
