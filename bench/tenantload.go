package bench

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/fairgate/fairgate/internal/demoapi"
	"github.com/fairgate/fairgate/shed"
)

// Role says what part a tenant plays in a scenario.
type Role uint8

const (
	// Innocent tenants send steady traffic well within their quotas; the
	// quiet baseline runs them alone.
	Innocent Role = iota
	// Noisy tenants are the load the scenario adds on top of the baseline:
	// the neighbour ramping up, the slow exporter, the batch jobs.
	Noisy
)

// String returns "innocent" or "noisy".
func (r Role) String() string {
	if r == Noisy {
		return "noisy"
	}
	return "innocent"
}

// MarshalText returns the JSON word for r.
func (r Role) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText parses "innocent" or "noisy" (a traffic file's role).
func (r *Role) UnmarshalText(b []byte) error {
	switch string(b) {
	case "innocent", "":
		*r = Innocent
	case "noisy":
		*r = Noisy
	default:
		return fmt.Errorf("unknown role %q (want innocent or noisy)", b)
	}
	return nil
}

// Arrivals is the shape of a tenant's open-loop arrival process.
type Arrivals uint8

const (
	// Poisson arrivals: exponential gaps, as independent users make.
	Poisson Arrivals = iota
	// Constant arrivals: evenly spaced, as a script's loop makes.
	Constant
)

// UnmarshalText parses "poisson" or "constant" (a traffic file's
// arrivals).
func (a *Arrivals) UnmarshalText(b []byte) error {
	switch string(b) {
	case "poisson", "":
		*a = Poisson
	case "constant":
		*a = Constant
	default:
		return fmt.Errorf("unknown arrivals %q (want poisson or constant)", b)
	}
	return nil
}

// Call is one kind of request in a tenant's route mix.
type Call struct {
	// Method and Path (with any query) of the request.
	Method string `yaml:"method"`
	Path   string `yaml:"path"`
	// Criticality labels the call's results; it matches the route's
	// criticality in the scenario's gateway config.
	Criticality shed.Criticality `yaml:"criticality"`
	// Weight is the call's share of the tenant's requests, relative to the
	// other calls' weights.
	Weight float64 `yaml:"weight"`
	// BodyBytes, when above 0, sends a body of that many bytes (with its
	// Content-Length).
	BodyBytes int `yaml:"body_bytes"`
	// Tokens, when set, makes the call a completion: each asks the
	// upstream for a number of tokens drawn from it (the query parameter
	// tokens=N, see demoapi.Config.TokensPerSecond).
	Tokens *Tokens `yaml:"tokens"`
}

// Tokens is a log-normal distribution of a completion's tokens: Median ×
// exp(Sigma × Z), Z standard normal, rounded, within 1 and Max, as the
// lengths of LLM completions spread.
type Tokens struct {
	Median float64 `yaml:"median"`
	Sigma  float64 `yaml:"sigma"`
	Max    int     `yaml:"max"`
}

// draw returns the tokens of a completion whose standard normal is z.
func (t *Tokens) draw(z float64) int {
	return min(max(int(math.Round(t.Median*math.Exp(t.Sigma*z))), 1), t.Max)
}

// mean is the distribution's mean, ignoring the bounds.
func (t *Tokens) mean() float64 { return t.Median * math.Exp(t.Sigma*t.Sigma/2) }

// Ramp changes a tenant's rate during a run. Times are fractions of the run
// (0 to 1); factors multiply TenantLoad.Rate.
type Ramp struct {
	// Start and Peak bound the ramp: the factor is From until Start, rises
	// linearly to To at Peak and stays there.
	Start float64 `yaml:"start"`
	Peak  float64 `yaml:"peak"`
	From  float64 `yaml:"from"`
	To    float64 `yaml:"to"`
}

// factor returns the rate multiplier at fraction x of the run.
func (r *Ramp) factor(x float64) float64 {
	switch {
	case r == nil:
		return 1
	case x <= r.Start:
		return r.From
	case x >= r.Peak:
		return r.To
	default:
		return r.From + (r.To-r.From)*(x-r.Start)/(r.Peak-r.Start)
	}
}

// TenantLoad is one tenant's traffic in a scenario.
type TenantLoad struct {
	// ID and Tier name the tenant in the gateway config; Key is its API
	// key (the config holds only its hash). With a user's config the tier
	// is the config's; a tenant without a key gets one of the bench's
	// own, added to that tenant in the gateway the bench runs.
	ID   string `yaml:"id"`
	Tier string `yaml:"tier"`
	Key  string `yaml:"key"`
	// Contract, when set, overrides the tier's quota in the generated
	// gateway config: the tenant's contract lets it send more than its
	// tier. A user's config ignores it.
	Contract *Contract `yaml:"contract"`
	Role     Role      `yaml:"role"`
	// Rate is the mean arrival rate in requests per second, multiplied by
	// Ramp's factor when Ramp is set.
	Rate float64 `yaml:"rate"`
	Ramp *Ramp   `yaml:"ramp"`
	// OnOff, when set, makes the tenant send in bursts: on at its rate,
	// then silent, over and over from the run's start (burst-gaming).
	OnOff    *OnOff   `yaml:"on_off"`
	Arrivals Arrivals `yaml:"arrivals"`
	// Calls is the route mix.
	Calls []Call `yaml:"flows"`
	// Concurrency, when above 0, bounds the tenant's requests in flight,
	// as a client with that many workers: an arrival waits for a free
	// one, and its latency counts from its arrival.
	Concurrency int `yaml:"concurrency"`
	// Users is the number of simulated users; each arrival belongs to a
	// random one. IPs is the number of source addresses they share: user u
	// connects from address u mod IPs. Zero means 1.
	Users int `yaml:"users"`
	IPs   int `yaml:"ips"`
	// Timeout is the client's timeout for a whole request.
	Timeout time.Duration `yaml:"timeout"`
	// HonourRetryAfter makes a user that got 429 or 503 skip its arrivals
	// until Retry-After has passed (counted as deferred); otherwise it keeps
	// sending, as a runaway script does.
	HonourRetryAfter bool `yaml:"honour_retry_after"`
	// Schedule, when set, replaces the arrival process (Rate, Ramp,
	// OnOff, Calls): the tenant sends exactly these requests at their
	// times (a replayed access log).
	Schedule []Arrival `yaml:"-"`
}

// Arrival is one request of a schedule: when, from the run's start, and
// what.
type Arrival struct {
	At   time.Duration
	Call Call
}

func (tl *TenantLoad) users() int { return max(tl.Users, 1) }
func (tl *TenantLoad) ips() int   { return max(tl.IPs, 1) }

// peakRate is the highest rate the tenant reaches.
func (tl *TenantLoad) peakRate() float64 {
	if tl.Ramp == nil {
		return tl.Rate
	}
	return tl.Rate * max(tl.Ramp.From, tl.Ramp.To)
}

// Contract is a tenant's own quota, replacing its tier's.
type Contract struct {
	// Rate in tokens per second and Burst in tokens.
	Rate  float64 `yaml:"rate"`
	Burst float64 `yaml:"burst"`
	// MaxConcurrent caps the tenant's requests executing upstream. Zero
	// keeps the tier's cap.
	MaxConcurrent int `yaml:"max_concurrent"`
}

// meanServiceTime is the mean time, in seconds, one of tl's requests holds
// a connection of up.
func (tl *TenantLoad) meanServiceTime(up *demoapi.API) float64 {
	var wsum, wd float64
	for _, c := range tl.Calls {
		wsum += c.Weight
		path, q, _ := strings.Cut(c.Path, "?")
		wd += c.Weight * up.MeanServiceTime(path, strings.TrimPrefix(q, "rows=")).Seconds()
	}
	return wd / wsum
}
