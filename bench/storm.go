package bench

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/fairgate/fairgate/admission"
	"github.com/fairgate/fairgate/internal/demoapi"
)

// retryStorm is the name of the scenario that compares retrying clients
// rather than front ends: Run hands it to runStorm.
const retryStorm = "retry-storm"

// The retry-storm's overload: for the middle third of a run the upstream
// keeps only stormDegraded of its connections (a database failing over, a
// replica lost), and it sheds with 503 and Retry-After: 1 once more than
// stormQueue requests wait for one.
const (
	stormDegraded = 2
	stormQueue    = 16
	// stormAttempts bounds the attempts per logical request, the first
	// included, for both kinds of client.
	stormAttempts = 4
	// stormRecovered is the fraction of the pre-overload goodput a second
	// after the overload must reach to count as recovered.
	stormRecovered = 0.95
)

// Retrier is how a retry-storm client handles a 429 or 503.
type Retrier uint8

const (
	// RetryAtOnce sends again at once, up to stormAttempts attempts.
	RetryAtOnce Retrier = iota
	// RetryClient is the client package's Transport.
	RetryClient
)

// String returns "at-once" or "client".
func (r Retrier) String() string {
	if r == RetryClient {
		return "client"
	}
	return "at-once"
}

// MarshalText returns the JSON word for r.
func (r Retrier) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// Storm is the retry-storm's figures, in results.json's "retry_storm".
type Storm struct {
	// OverloadFromS and OverloadToS bound the overload, in seconds from a
	// run's start.
	OverloadFromS float64 `json:"overload_from_s"`
	OverloadToS   float64 `json:"overload_to_s"`
	// Runs holds one entry per mode and kind of client, in run order.
	Runs []StormFigures `json:"runs"`
}

// StormFigures are one retry-storm run's figures. Goodput counts logical
// requests (all attempts of one arrival): those that ended in a 2xx ÷
// those offered.
type StormFigures struct {
	Mode    string  `json:"mode"`
	Clients Retrier `json:"clients"`
	// Offered is the logical requests, OK those that succeeded, Attempts
	// the HTTP requests the clients sent for them.
	Offered  int `json:"offered"`
	OK       int `json:"ok"`
	Attempts int `json:"attempts"`
	// GoodputPct is OK ÷ Offered over the run; Before, During and After
	// over the logical requests that arrived before, during and after the
	// overload. All in percent.
	GoodputPct       float64 `json:"goodput_pct"`
	GoodputBeforePct float64 `json:"goodput_before_pct"`
	GoodputDuringPct float64 `json:"goodput_during_pct"`
	GoodputAfterPct  float64 `json:"goodput_after_pct"`
	// UpstreamBeforePerS, UpstreamDuringPerS and UpstreamAfterPerS are the
	// requests reaching the upstream per second (503s it sheds included)
	// in each phase; UpstreamPeakPerS the busiest second.
	UpstreamBeforePerS float64 `json:"upstream_before_per_s"`
	UpstreamDuringPerS float64 `json:"upstream_during_per_s"`
	UpstreamAfterPerS  float64 `json:"upstream_after_per_s"`
	UpstreamPeakPerS   float64 `json:"upstream_peak_per_s"`
	// RecoveryS is the time from the overload's end to the start of the
	// first second whose goodput (successes completed in it ÷ arrivals in
	// it) is back to stormRecovered of the mean before the overload; -1
	// when no second of the run got there.
	RecoveryS float64 `json:"recovery_s"`
	// GoodputSeries and UpstreamSeries are per second of the run: the
	// goodput (percent, as for RecoveryS) and the upstream's requests.
	GoodputSeries  []float64 `json:"goodput_series_pct"`
	UpstreamSeries []int64   `json:"upstream_series"`
}

// logical is one arrival's record: when it arrived and ended, whether it
// succeeded, and its attempts (the client package's are counted by its
// Transports instead).
type logical struct {
	at, done time.Duration
	ok       bool
	attempts int
}

// runStorm runs retry-storm: each mode with each kind of client.
func runStorm(ctx context.Context, sc *Scenario, o Options) (*Results, error) {
	res := &Results{Scenario: sc.Name, Description: sc.Description, DurationS: o.Duration.Seconds(),
		Seed: o.Seed, Machine: machineNow(o.GCPercent), Storm: &Storm{OverloadFromS: o.Duration.Seconds() / 3, OverloadToS: 2 * o.Duration.Seconds() / 3}}
	for _, m := range o.Modes {
		res.Modes = append(res.Modes, m.String())
		for _, rt := range []Retrier{RetryAtOnce, RetryClient} {
			f, err := stormOnce(ctx, sc, m, rt, o)
			if err != nil {
				return nil, fmt.Errorf("bench: %s/%s/%s: %w", sc.Name, m, rt, err)
			}
			res.Storm.Runs = append(res.Storm.Runs, f)
		}
	}
	res.Machine.LoadEnd = loadAverage()
	return res, ctx.Err()
}

// stormOnce runs sc's load for o.Duration with clients rt behind mode m,
// the upstream degraded for the middle third.
func stormOnce(ctx context.Context, sc *Scenario, m Mode, rt Retrier, o Options) (StormFigures, error) {
	if err := ctx.Err(); err != nil {
		return StormFigures{}, err
	}
	from, to := o.Duration/3, 2*o.Duration/3
	up := newStormUpstream(demoapi.New(sc.Upstream), from, to, o.Duration+o.Drain)
	srv, err := serve(up)
	if err != nil {
		return StormFigures{}, err
	}
	defer srv.close()
	front, err := startFront(ctx, m, frontEnv{scenario: sc, upstream: srv.url, redisAddr: o.RedisAddr})
	if err != nil {
		return StormFigures{}, err
	}
	defer front.close()
	if err := warmUp(ctx, front.url); err != nil {
		return StormFigures{}, err
	}
	g, err := newStormLoad(front.url, sc.Tenants, rt)
	if err != nil {
		return StormFigures{}, err
	}
	defer g.close()
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "%s/%s/%s: %s of arrivals\n", sc.Name, m, rt, o.Duration)
	}
	up.start.Store(time.Now().UnixNano())
	recs := g.run(ctx, o.Duration, o.Drain, o.Seed)
	f := stormFigures(recs, up.series(), o.Duration)
	f.Mode, f.Clients = m.String(), rt
	if rt == RetryClient {
		f.Attempts = g.clientAttempts()
	}
	return f, nil
}

// stormUpstream is the retry-storm's upstream: the demo API, degraded to
// stormDegraded connections between from and to, shedding beyond
// stormQueue waiting, and counting the requests that reach it per second.
type stormUpstream struct {
	api      http.Handler
	from, to time.Duration
	start    atomic.Int64 // unix nanoseconds; 0 before the run (warm-up)
	bound    int64        // requests inside at once: connections + stormQueue
	inside   atomic.Int64
	degraded chan struct{}
	perSec   []atomic.Int64
}

func newStormUpstream(api *demoapi.API, from, to, total time.Duration) *stormUpstream {
	return &stormUpstream{api: api, from: from, to: to, bound: int64(api.Connections() + stormQueue),
		degraded: make(chan struct{}, stormDegraded), perSec: make([]atomic.Int64, int(math.Ceil(total.Seconds()))+1)}
}

func (u *stormUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var at time.Duration = -1
	if s := u.start.Load(); s != 0 {
		at = time.Duration(time.Now().UnixNano() - s)
		u.perSec[min(int(at/time.Second), len(u.perSec)-1)].Add(1)
	}
	defer u.inside.Add(-1)
	if u.inside.Add(1) > u.bound {
		admission.WriteError(w, http.StatusServiceUnavailable, &admission.Rejection{Error: "overloaded", Layer: "upstream",
			Reason: "queue_full", RetryAfter: 1, Message: "The upstream is overloaded."})
		return
	}
	if at >= u.from && at < u.to {
		select {
		case u.degraded <- struct{}{}:
			defer func() { <-u.degraded }()
		case <-r.Context().Done():
			return
		}
	}
	u.api.ServeHTTP(w, r)
}

// series returns the requests that reached u in each second of the run.
func (u *stormUpstream) series() []int64 {
	out := make([]int64, len(u.perSec))
	for i := range u.perSec {
		out[i] = u.perSec[i].Load()
	}
	return out
}
