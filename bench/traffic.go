package bench

import (
	"bytes"
	"cmp"
	"embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fairgate/fairgate/internal/demoapi"
)

// Traffic is a traffic file: the tenants, what each sends and how fast,
// which of them are noisy and which innocent, and what the innocents must
// get. Every built-in scenario is one (bench/scenarios/NAME.yaml), and
// `fairgate bench --traffic FILE` runs a user's own, so both take one code
// path: Traffic.Scenario.
type Traffic struct {
	// Name names the run in report.md and results.json; the file's base
	// name when empty.
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	// Targets are what every innocent tenant must get in a protected mode
	// (the isolation targets: 99% goodput, p99 within 1.2× its quiet
	// baseline, when absent).
	Targets *Targets `yaml:"targets"`
	// Tenants are the tenants' loads. An entry with a count above 1
	// stands for that many tenants, its id a pattern with one %d verb
	// (enterprise-%02d: enterprise-01, enterprise-02, …).
	Tenants []TenantFile `yaml:"tenants"`
	// DrawNoisy, when set, turns count of the tenants above, drawn by the
	// run's seed, into noisy ones: the fields of Set replace theirs.
	DrawNoisy *DrawNoisy `yaml:"draw_noisy"`
	// Demo is the built-in environment the bench simulates when it is not
	// given a target and a config: the demo upstream, the gateway config's
	// head, and the alternatives fairgate is compared with.
	Demo Demo `yaml:"demo"`
}

// TenantFile is one entry of a traffic file's tenants: a TenantLoad and,
// for a pattern, how many tenants it stands for.
type TenantFile struct {
	TenantLoad `yaml:",inline"`
	Count      int `yaml:"count"`
}

// DrawNoisy draws noisy tenants from a traffic file's tenants.
type DrawNoisy struct {
	Count int `yaml:"count"`
	// Set is a tenant's fields, given as in a tenant entry: those it
	// names replace the drawn tenant's.
	Set yaml.Node `yaml:"set"`
}

// Demo is what a built-in scenario runs on besides its traffic.
type Demo struct {
	// Upstream is the simulated API (default 8 connections, the demo
	// routes' service times).
	Upstream DemoUpstream `yaml:"upstream"`
	// GlobalTokens is the fairgate config's global backstop, in tokens
	// per second (burst twice that); 0 for none. Default 400.
	GlobalTokens *float64 `yaml:"global_tokens"`
	// GlobalBurst scales the global mode's bucket (burst = rate ×
	// GlobalBurst seconds). Default 0.5.
	GlobalBurst float64 `yaml:"global_burst"`
	// IPRate and IPBurst are the ip mode's per-address bucket. Default
	// 10 and 20.
	IPRate  float64 `yaml:"ip_rate"`
	IPBurst float64 `yaml:"ip_burst"`
	// Baseline is the quiet baseline's mode (default none, the plain
	// proxy; direct for a scenario that measures the proxy itself).
	Baseline *Mode `yaml:"baseline"`
	// Modes replaces DefaultModes() for the scenario when set.
	Modes []Mode `yaml:"modes"`
	// Config replaces the gateway config's head (tiers, routes, pools):
	// YAML with one %s, the upstream's URL. The tenants are appended.
	Config string `yaml:"config"`
	// Unlimited lifts every tenant quota and cap in the gateway config
	// (a scenario that measures the proxy, not the limits).
	Unlimited bool `yaml:"unlimited"`
}

// DemoUpstream is the simulated API's settings in a traffic file.
type DemoUpstream struct {
	Connections int `yaml:"connections"`
	// Jitter is the spread of service times (demoapi.Config.Jitter): 0
	// means the default 0.3, negative none.
	Jitter          float64 `yaml:"jitter"`
	TokensPerSecond float64 `yaml:"tokens_per_second"`
}

//go:embed scenarios/*.yaml
var scenarioFiles embed.FS

// builtinTraffic returns the built-in scenario name's traffic file.
func builtinTraffic(name string) (*Traffic, error) {
	data, err := scenarioFiles.ReadFile("scenarios/" + name + ".yaml")
	if err != nil {
		return nil, err
	}
	return ParseTraffic(data, name)
}

// LoadTraffic reads and parses the traffic file at file.
func LoadTraffic(file string) (*Traffic, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	name := strings.TrimSuffix(path.Base(strings.ReplaceAll(file, `\`, "/")), path.Ext(file))
	tr, err := ParseTraffic(data, name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return tr, nil
}

// ParseTraffic parses a traffic file whose name, when it names none
// itself, is name. Unknown fields and invalid values are errors naming
// their field.
func ParseTraffic(data []byte, name string) (*Traffic, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var tr Traffic
	if err := dec.Decode(&tr); err != nil {
		return nil, trafficYAMLError(err)
	}
	if tr.Name == "" {
		tr.Name = name
	}
	if err := tr.validate(); err != nil {
		return nil, err
	}
	return &tr, nil
}

// yamlTypeName matches yaml.v3's "not found in type bench.X", which names
// a Go type the file's reader need not know.
var yamlTypeName = regexp.MustCompile(`field (\S+) not found in type \S+`)

func trafficYAMLError(err error) error {
	return errors.New(yamlTypeName.ReplaceAllString(err.Error(), "unknown field $1"))
}

// validate checks every tenant entry and the draw, naming the field of
// each problem ("tenants[2].rate: …").
func (tr *Traffic) validate() error {
	var errs []error
	bad := func(f string, format string, a ...any) { errs = append(errs, fmt.Errorf(f+": "+format, a...)) }
	if len(tr.Tenants) == 0 {
		bad("tenants", "a traffic file needs at least one tenant")
	}
	ids := map[string]string{}
	for i, e := range tr.Tenants {
		f := fmt.Sprintf("tenants[%d]", i)
		if e.Count < 0 || e.Count > 10_000 {
			bad(f+".count", "must be between 1 and 10000 (got %d)", e.Count)
			continue
		}
		if e.Count > 1 && strings.Count(e.ID, "%") != 1 {
			bad(f+".id", "with count, must hold one %%d verb, such as %q (got %q)", e.ID+"-%02d", e.ID)
			continue
		}
		for _, tl := range e.expand() {
			if tl.ID == "" {
				bad(f+".id", "required")
				break
			}
			if prev, dup := ids[tl.ID]; dup {
				bad(f+".id", "tenant %q already named by %s", tl.ID, prev)
				break
			}
			ids[tl.ID] = f
		}
		errs = append(errs, e.TenantLoad.validate(f)...)
	}
	if d := tr.DrawNoisy; d != nil && (d.Count < 1 || d.Count > len(ids)) {
		bad("draw_noisy.count", "must be between 1 and the tenants' number, %d (got %d)", len(ids), d.Count)
	}
	if c := tr.Demo.Config; c != "" && strings.Count(c, "%s") != 1 {
		bad("demo.config", "must hold one %%s, where the upstream's URL goes")
	}
	return errors.Join(errs...)
}

// validate checks one tenant's load, its fields named under f.
func (tl *TenantLoad) validate(f string) []error {
	var errs []error
	bad := func(field string, format string, a ...any) {
		errs = append(errs, fmt.Errorf(f+"."+field+": "+format, a...))
	}
	if tl.Schedule == nil {
		if !(tl.Rate > 0 && tl.Rate <= 100_000) {
			bad("rate", "requests a second, must be in (0, 100000] (got %g)", tl.Rate)
		}
		if len(tl.Calls) == 0 {
			bad("flows", "at least one flow (method, path, weight)")
		}
	}
	for j, c := range tl.Calls {
		if c.Method == "" || strings.ContainsAny(c.Method, " \t\r\n") {
			bad(fmt.Sprintf("flows[%d].method", j), "required, one word (got %q)", c.Method)
		}
		if !strings.HasPrefix(c.Path, "/") {
			bad(fmt.Sprintf("flows[%d].path", j), "must start with / (got %q)", c.Path)
		}
		if !(c.Weight > 0) {
			bad(fmt.Sprintf("flows[%d].weight", j), "must be above 0 (got %g)", c.Weight)
		}
		if c.BodyBytes < 0 || c.BodyBytes > 64<<20 {
			bad(fmt.Sprintf("flows[%d].body_bytes", j), "must be between 0 and 64 MiB (got %d)", c.BodyBytes)
		}
	}
	if r := tl.Ramp; r != nil && !(0 <= r.Start && r.Start < r.Peak && r.Peak <= 1 && r.From >= 0 && r.To >= 0) {
		bad("ramp", "needs 0 ≤ start < peak ≤ 1 (fractions of the run) and from, to ≥ 0 (rate factors)")
	}
	if p := tl.OnOff; p != nil && !(p.On > 0 && p.Off > 0) {
		bad("on_off", "needs on and off above 0 (got %v, %v)", p.On, p.Off)
	}
	if tl.Timeout <= 0 {
		bad("timeout", "required: the client's timeout for a whole request, such as 5s")
	}
	if tl.Users < 0 || tl.IPs < 0 || tl.IPs > 10_000 {
		bad("users", "users ≥ 0 and 0 ≤ ips ≤ 10000")
	}
	if tl.Concurrency < 0 {
		bad("concurrency", "must be 0 (no bound) or more (got %d)", tl.Concurrency)
	}
	return errs
}

// expand returns the tenants an entry stands for.
func (e *TenantFile) expand() []TenantLoad {
	if e.Count <= 1 {
		return []TenantLoad{e.TenantLoad}
	}
	out := make([]TenantLoad, e.Count)
	for i := range out {
		out[i] = e.TenantLoad
		out[i].ID = fmt.Sprintf(e.ID, i+1)
	}
	return out
}

// Scenario returns the traffic as a scenario: its tenants expanded (keys
// defaulted to bench-ID-key), the noisy ones drawn by seed, and the
// demo environment's defaults filled in.
func (tr *Traffic) Scenario(seed uint64) (Scenario, error) {
	d := &tr.Demo
	s := Scenario{Name: tr.Name, Description: tr.Description, Targets: defaultTargets,
		Upstream:    demoapi.Config{Connections: cmp.Or(d.Upstream.Connections, 8), Jitter: d.Upstream.Jitter, TokensPerSecond: d.Upstream.TokensPerSecond},
		GlobalBurst: cmp.Or(d.GlobalBurst, 0.5), IPRate: cmp.Or(d.IPRate, 10), IPBurst: cmp.Or(d.IPBurst, 20),
		GlobalTokens: 400, DefaultModes: slices.Clone(d.Modes), unlimited: d.Unlimited, config: d.Config}
	if d.GlobalTokens != nil {
		s.GlobalTokens = *d.GlobalTokens
	}
	if d.Baseline != nil {
		s.Baseline = *d.Baseline
	}
	if tr.Targets != nil {
		s.Targets = *tr.Targets
	}
	for _, e := range tr.Tenants {
		s.Tenants = append(s.Tenants, e.expand()...)
	}
	for i := range s.Tenants {
		tl := &s.Tenants[i]
		if tl.Key == "" {
			tl.Key = "bench-" + tl.ID + "-key"
		}
	}
	if dn := tr.DrawNoisy; dn != nil {
		rng := rand.New(rand.NewPCG(seed, 0x6d616e79)) // "many"
		drawn := rng.Perm(len(s.Tenants))[:dn.Count]
		for _, i := range drawn {
			if err := dn.Set.Decode(&s.Tenants[i]); err != nil {
				return Scenario{}, fmt.Errorf("draw_noisy.set: %w", trafficYAMLError(err))
			}
		}
		slices.Sort(drawn)
		noisy := make([]string, len(drawn))
		for j, i := range drawn {
			noisy[j] = s.Tenants[i].ID
		}
		s.Description = strings.ReplaceAll(s.Description, "{noisy}", strings.Join(noisy, ", "))
	}
	return s, nil
}

// OnOff makes a tenant send in bursts: On at its rate, then Off silent,
// over and over from the run's start.
type OnOff struct {
	On  time.Duration `yaml:"on"`
	Off time.Duration `yaml:"off"`
}

// silent reports whether the pattern is off t seconds into the run.
func (p *OnOff) silent(t float64) bool {
	if p == nil {
		return false
	}
	cycle := (p.On + p.Off).Seconds()
	return t-cycle*float64(int(t/cycle)) >= p.On.Seconds()
}
