package admission

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/bulkhead"
	"github.com/fairgate/fairgate/internal/suggest"
	"github.com/fairgate/fairgate/shed"
	"github.com/fairgate/fairgate/tenant"
)

// Config is the admission part of the config file.
type Config struct {
	// Routes classify requests by method and path template; the first
	// match wins. A request that matches none is priced by Unmatched and
	// labelled "unmatched".
	Routes []RouteConfig `yaml:"routes"`
	// Unmatched prices the requests that match no route. Nil means cost 1
	// and default criticality; set it so that an unknown path costs as
	// much as the dearest route.
	Unmatched *UnmatchedConfig `yaml:"unmatched"`
	// EncodedSlashes is what a path with an escaped '/' ("%2F") gets:
	// "refuse" (400, the default) or "allow" (classified with the %2F
	// inside its segment, as an upstream routing on the escaped path sees
	// it, and forwarded as sent).
	EncodedSlashes EncodedSlashes `yaml:"encoded_slashes"`
	// HideCredentials removes the credential fairgate verified (the
	// Authorization: Bearer header or X-API-Key, whichever identified the
	// tenant) before the request goes on, so the raw key never reaches the
	// upstream; other credentials (Basic for the upstream) pass. Nil means
	// true.
	HideCredentials *bool `yaml:"hide_credentials"`
	// Global is the backstop every tenant shares, sized below the sum of
	// the tiers' rates so that tenants all inside their quotas still
	// cannot together exceed what the upstream was sized for. It is shared
	// fairly, not first-come: while it binds it refuses (503) only tenants
	// above their weighted fair share of its rate. Nil means no backstop.
	Global *GlobalConfig `yaml:"global"`
	// Unauthenticated limits requests without a valid API key, per client
	// IP (the one place an IP limit is right: key guessing). Over it: 429
	// instead of 401. Nil means 10 attempts of burst and 1 a second.
	Unauthenticated *tenant.Quota `yaml:"unauthenticated"`
	// Anonymous limits the requests of routes with auth: none, per client
	// IP (IPv6 per /64), each taking its route's cost. Nil means 20
	// tokens of burst and 10 a second.
	Anonymous *tenant.Quota `yaml:"anonymous"`
	// Bulkhead divides the upstream's concurrency into pools (one per tier
	// unless tiers.NAME.pool or routes[].pool say otherwise), each with a
	// bounded queue served fairly across tenants. Nil means no pools.
	Bulkhead *bulkhead.Config `yaml:"bulkhead"`
	// Adaptive learns the total concurrency from upstream latency; the
	// pools divide what it learns. Nil means the fixed bulkhead.total.
	Adaptive *shed.AdaptiveConfig `yaml:"adaptive"`
	// Shedding rejects the lowest priorities first when a pool's queue
	// builds. Nil means on with defaults whenever pools or the adaptive
	// limit are configured; shedding.disabled turns it off.
	Shedding *shed.SheddingConfig `yaml:"shedding"`
	// TrustedPriorityFrom lists the networks (CIDR, e.g. 10.0.0.0/8) whose
	// callers may set a request's priority (0–499) with the
	// X-Fairgate-Priority header: internal services that know better than
	// the route table. From anywhere else the header is deleted at the
	// edge. Empty (the default) trusts nobody.
	TrustedPriorityFrom []string `yaml:"trusted_priority_from"`
}

// GlobalConfig is the global backstop: a bucket of Rate tokens a second up
// to Burst, shared by weighted max-min fair share among the tenants active
// over about the last Window.
type GlobalConfig struct {
	// Rate in tokens per second and Burst in tokens, as a tier's.
	Rate  float64 `yaml:"rate"`
	Burst float64 `yaml:"burst"`
	// Window is how far back a tenant's recent use of the backstop looks
	// (the time constant of its decayed rate). Zero means
	// DefaultGlobalWindow; at least 100ms, at most 1m.
	Window time.Duration `yaml:"window"`
}

// DefaultGlobalWindow is the global backstop's window when the config sets
// none.
const DefaultGlobalWindow = time.Second

// UnmatchedConfig prices the requests that match no route.
type UnmatchedConfig struct {
	// Cost is the tokens such a request takes: >= 1, and no larger than
	// any tier's, tenant's or the global burst. Zero means 1.
	Cost float64 `yaml:"cost"`
	// Criticality is critical, default or sheddable. Default: default.
	Criticality shed.Criticality `yaml:"criticality"`
}

// EncodedSlashes is what a request whose path holds an escaped '/' gets.
type EncodedSlashes uint8

const (
	// RefuseEncodedSlashes answers 400 (reason encoded_slash): "/a%2Fb"
	// is one segment to some upstreams and two to others, so fairgate
	// cannot know which route it is.
	RefuseEncodedSlashes EncodedSlashes = iota
	// AllowEncodedSlashes classifies the path with each %2F inside its
	// segment and forwards it as sent.
	AllowEncodedSlashes
)

// UnmarshalText parses "refuse" or "allow" (empty means refuse) and rejects
// anything else.
func (e *EncodedSlashes) UnmarshalText(b []byte) error {
	switch string(b) {
	case "", "refuse":
		*e = RefuseEncodedSlashes
	case "allow":
		*e = AllowEncodedSlashes
	default:
		return fmt.Errorf("encoded_slashes: %q is not refuse or allow", b)
	}
	return nil
}

// String returns "refuse" or "allow".
func (e EncodedSlashes) String() string {
	if e == AllowEncodedSlashes {
		return "allow"
	}
	return "refuse"
}

// DefaultUnauthenticated is the per-IP limit on requests without a valid key
// when the config sets none.
var defaultUnauthenticated = tenant.Quota{Rate: 1, Burst: 10}

// defaultAnonymous is the per-IP limit on auth: none routes when the config
// sets none.
var defaultAnonymous = tenant.Quota{Rate: 10, Burst: 20}

// Validate checks c on its own. New also checks it against the tenants'
// tiers (a route cost above a tier's burst, an unknown route group).
func (c *Config) Validate() error {
	_, err := c.compile(nil)
	return err
}

// compiled is a Config checked and turned into what the hot path reads.
type compiled struct {
	reg    *tenant.Registry
	routes routeTable
	global *ratelimit.BackstopLimit
	unauth ratelimit.Limit
	anon   ratelimit.Limit
	// flows holds each tenant's fair-queue flow names, one per
	// criticality ("acme/critical", …), built once so the hot path does
	// not concatenate strings.
	flows map[*tenant.Tenant]*[3]string
	// limitScopes holds each tenant's limits' bucket scopes, in the order
	// of its Limits: "limit/NAME", apart from the groups' scopes (a
	// group's name holds no '/'), and a fixed window's cut after '@'
	// ("limit/daily@day/Europe/Berlin", tenant.Window.Key).
	limitScopes map[*tenant.Tenant][]string
	// limitWindows holds each tenant's limits' calendars, in the same
	// order: the zero Calendar for a token bucket. Nil for a tenant whose
	// limits are all buckets.
	limitWindows map[*tenant.Tenant][]ratelimit.Calendar
	// trusted are the networks whose X-Fairgate-Priority is believed.
	trusted []netip.Prefix
	// slashes is what a path with an escaped '/' gets.
	slashes EncodedSlashes
	// hideCredentials: remove the verified credential before next.
	hideCredentials bool
}

func (c *Config) compile(reg *tenant.Registry) (*compiled, error) {
	var errs []error
	out := &compiled{reg: reg, slashes: c.EncodedSlashes, hideCredentials: c.HideCredentials == nil || *c.HideCredentials}
	if c.EncodedSlashes > AllowEncodedSlashes {
		errs = append(errs, fmt.Errorf("encoded_slashes: unknown value %d (refuse or allow)", c.EncodedSlashes))
	}
	seen := map[string]int{}
	groups := map[string]bool{}
	if reg != nil {
		for _, tc := range reg.Tiers() {
			for g := range tc.Groups {
				groups[g] = true
			}
		}
	}
	for i, rc := range c.Routes {
		r, err := compileRoute(rc, i)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if j, dup := seen[r.Name]; dup {
			errs = append(errs, fmt.Errorf("routes[%d]: duplicate route %q: also routes[%d]", i, r.Name, j))
		}
		seen[r.Name] = i
		if r.Group != "" && !tenant.ValidID(r.Group) {
			errs = append(errs, fmt.Errorf("routes[%d].group: must be 1-64 letters, digits, '.', '_' or '-'", i))
		}
		if reg != nil && r.Group != "" && !groups[r.Group] {
			errs = append(errs, fmt.Errorf("routes[%d].group: no tier sets a quota for group %q (tiers.NAME.groups.%s)%s", i, r.Group, r.Group, suggest.DidYouMean(r.Group, slices.Sorted(maps.Keys(groups)))))
		}
		errs = append(errs, checkCost(fmt.Sprintf("routes[%d].cost", i), r, reg, c.Global)...)
		out.routes.routes = append(out.routes.routes, r)
	}
	out.routes.unmatched = &Route{Name: unmatchedName, Method: "*", Template: "", Cost: 1}
	if u := c.Unmatched; u != nil {
		if u.Cost != 0 {
			out.routes.unmatched.Cost = u.Cost
		}
		out.routes.unmatched.Criticality = u.Criticality
		if r := out.routes.unmatched; !(r.Cost >= 1) || r.Cost > 1e9 {
			errs = append(errs, fmt.Errorf("unmatched.cost: must be >= 1 (tokens)"))
		} else {
			errs = append(errs, checkCost("unmatched.cost", r, reg, c.Global)...)
		}
	}
	if c.Global != nil {
		w := c.Global.Window
		if w == 0 {
			w = DefaultGlobalWindow
		}
		if err := (tenant.Quota{Rate: c.Global.Rate, Burst: c.Global.Burst}).Validate("global"); err != nil {
			errs = append(errs, err)
		} else if w < 100*time.Millisecond || w > time.Minute {
			errs = append(errs, fmt.Errorf("global.window: %v must be in [100ms, 1m]", w))
		} else {
			out.global = &ratelimit.BackstopLimit{Rate: c.Global.Rate, Burst: c.Global.Burst, Window: w}
			for i, r := range out.routes.routes {
				if r.Cost > c.Global.Burst {
					errs = append(errs, fmt.Errorf("routes[%d].cost: %v is above global.burst (%v): such a request could never pass", i, r.Cost, c.Global.Burst))
				}
			}
		}
	}
	var err error
	if out.unauth, err = limitOr("unauthenticated", c.Unauthenticated, defaultUnauthenticated); err != nil {
		errs = append(errs, err)
	}
	if out.anon, err = limitOr("anonymous", c.Anonymous, defaultAnonymous); err != nil {
		errs = append(errs, err)
	}
	for i, r := range out.routes.routes {
		if r.Anonymous && r.Cost > out.anon.Burst {
			errs = append(errs, fmt.Errorf("routes[%d].cost: %v is above anonymous.burst (%v): such a request could never pass", i, r.Cost, out.anon.Burst))
		}
	}
	if reg != nil {
		out.flows = make(map[*tenant.Tenant]*[3]string, len(reg.Tenants()))
		out.limitScopes = make(map[*tenant.Tenant][]string, len(reg.Tenants()))
		for _, t := range reg.Tenants() {
			for i, l := range t.Limits {
				if l.Window.IsZero() {
					out.limitScopes[t] = append(out.limitScopes[t], "limit/"+l.Name)
					continue
				}
				out.limitScopes[t] = append(out.limitScopes[t], "limit/"+l.Name+"@"+l.Window.Key())
				cal, err := l.Window.Calendar()
				if err != nil {
					errs = append(errs, fmt.Errorf("tenant %s's limits.%s.time_zone: %w", t.ID, l.Name, err))
				}
				if out.limitWindows == nil {
					out.limitWindows = map[*tenant.Tenant][]ratelimit.Calendar{}
				}
				if out.limitWindows[t] == nil {
					out.limitWindows[t] = make([]ratelimit.Calendar, len(t.Limits))
				}
				out.limitWindows[t][i] = cal
			}
			var f [3]string
			for _, c := range []shed.Criticality{shed.Default, shed.Critical, shed.Sheddable} {
				f[c] = t.ID + "/" + c.String()
			}
			out.flows[t] = &f
		}
	}
	for i, cidr := range c.TrustedPriorityFrom {
		p, err := netip.ParsePrefix(cidr)
		if err != nil {
			errs = append(errs, fmt.Errorf("trusted_priority_from[%d]: %q is not a CIDR prefix (like 10.0.0.0/8)", i, cidr))
			continue
		}
		out.trusted = append(out.trusted, p.Masked())
	}
	errs = append(errs, c.checkLayers(reg, out.routes.routes)...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// checkCost checks that a request of route r can pass every bucket it may
// be charged to: each tier's and tenant's burst, the group's burst, the
// global burst. field is the cost's path in the file.
func checkCost(field string, r *Route, reg *tenant.Registry, global *GlobalConfig) []error {
	var errs []error
	never := func(what string, burst float64) {
		errs = append(errs, fmt.Errorf("%s: %v is above %s (%v): such a request could never pass", field, r.Cost, what, burst))
	}
	if reg != nil {
		for name, tc := range reg.Tiers() {
			if r.Cost > tc.Burst {
				never("tiers."+tenant.PathKey(name)+".burst", tc.Burst)
			}
			if q, ok := tc.Groups[r.Group]; ok && r.Cost > q.Burst {
				never("tiers."+tenant.PathKey(name)+".groups."+r.Group+".burst", q.Burst)
			}
		}
		for _, t := range reg.Tenants() {
			if r.Cost > t.Burst {
				never("tenant "+t.ID+"'s burst", t.Burst)
			}
			for _, l := range t.Limits {
				if r.Cost > l.Burst {
					never("tenant "+t.ID+"'s limits."+l.Name+".burst", l.Burst)
				}
			}
		}
	}
	if global != nil && global.Burst >= 1 && r.Cost > global.Burst {
		never("global.burst", global.Burst)
	}
	return errs
}

// limitOr returns q as a Limit, checked and named field in errors, or def
// when q is nil.
func limitOr(field string, q *tenant.Quota, def tenant.Quota) (ratelimit.Limit, error) {
	if q != nil {
		def = *q
	}
	l := ratelimit.Limit{Rate: def.Rate, Burst: def.Burst}
	if q == nil {
		return l, nil
	}
	return l, def.Validate(field)
}

// checkLayers checks the bulkhead, adaptive and shedding sections, and that
// every pool a tier or route names exists.
func (c *Config) checkLayers(reg *tenant.Registry, routes []*Route) []error {
	var errs []error
	if c.Bulkhead != nil {
		if err := c.Bulkhead.Validate(); err != nil {
			errs = append(errs, fieldErrors("bulkhead.", "bulkhead: invalid config: ", err)...)
		}
	}
	if c.Adaptive != nil {
		if err := c.Adaptive.Validate(); err != nil {
			errs = append(errs, fieldErrors("", "shed: invalid config: ", err)...)
		}
	}
	if c.Shedding != nil {
		if err := c.Shedding.Validate(); err != nil {
			errs = append(errs, fieldErrors("", "shed: invalid config: ", err)...)
		}
	}
	hasPool := func(name string) bool {
		_, ok := c.Bulkhead.Pools[name]
		return ok
	}
	var pools []string // sorted, for the nearest name to a misspelt one
	if c.Bulkhead != nil {
		pools = slices.Sorted(maps.Keys(c.Bulkhead.Pools))
	}
	for i, r := range routes {
		if r.Pool == "" {
			continue
		}
		if c.Bulkhead == nil {
			errs = append(errs, fmt.Errorf("routes[%d].pool: %q names a pool but there is no bulkhead section", i, r.Pool))
		} else if !hasPool(r.Pool) {
			errs = append(errs, fmt.Errorf("routes[%d].pool: unknown pool %q%s", i, r.Pool, suggest.DidYouMean(r.Pool, pools)))
		}
	}
	if reg != nil && c.Bulkhead != nil {
		for name, tc := range reg.Tiers() {
			pool := tc.Pool
			if pool == "" {
				pool = name
			}
			if !hasPool(pool) {
				errs = append(errs, fmt.Errorf("tiers.%s.pool: no pool %q under bulkhead.pools (a tier uses the pool named like it unless tiers.%s.pool says otherwise)%s", tenant.PathKey(name), pool, tenant.PathKey(name), suggest.DidYouMean(pool, pools)))
			}
		}
	}
	return errs
}

// fieldErrors splits a package's joined validation error into one error per
// line, replacing the package's own prefix with the field's path in the file.
func fieldErrors(path, pkgPrefix string, err error) []error {
	var out []error
	for _, line := range strings.Split(err.Error(), "\n") {
		out = append(out, errors.New(path+strings.TrimPrefix(line, pkgPrefix)))
	}
	return out
}
