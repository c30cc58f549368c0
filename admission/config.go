package admission

import (
	"errors"
	"fmt"

	"github.com/fairgate/fairgate/tenant"
)

// Config is the admission part of the config file.
type Config struct {
	// Routes classify requests by method and path template; the first
	// match wins. A request that matches none costs 1 token, has default
	// criticality and is labelled "unmatched".
	Routes []RouteConfig `yaml:"routes"`
	// Global is the backstop bucket shared by every tenant, sized below the
	// sum of the tiers' rates so that tenants all inside their quotas still
	// cannot together exceed what the upstream was sized for. Over it: 503.
	// Nil means no backstop.
	Global *tenant.Quota `yaml:"global"`
	// Unauthenticated limits requests without a valid API key, per client
	// IP (the one place an IP limit is right: key guessing). Over it: 429
	// instead of 401. Nil means 10 attempts of burst and 1 a second.
	Unauthenticated *tenant.Quota `yaml:"unauthenticated"`
}

// DefaultUnauthenticated is the per-IP limit on requests without a valid key
// when the config sets none.
var defaultUnauthenticated = tenant.Quota{Rate: 1, Burst: 10}

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
	global *Limit
	unauth Limit
}

func (c *Config) compile(reg *tenant.Registry) (*compiled, error) {
	var errs []error
	out := &compiled{reg: reg}
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
		if reg != nil {
			if r.Group != "" && !groups[r.Group] {
				errs = append(errs, fmt.Errorf("routes[%d].group: no tier sets a quota for group %q (tiers.NAME.groups.%s)", i, r.Group, r.Group))
			}
			for name, tc := range reg.Tiers() {
				if r.Cost > tc.Burst {
					errs = append(errs, fmt.Errorf("routes[%d].cost: %v is above tiers.%s.burst (%v): such a request could never pass", i, r.Cost, name, tc.Burst))
				}
				if q, ok := tc.Groups[r.Group]; ok && r.Cost > q.Burst {
					errs = append(errs, fmt.Errorf("routes[%d].cost: %v is above tiers.%s.groups.%s.burst (%v): such a request could never pass", i, r.Cost, name, r.Group, q.Burst))
				}
			}
			for _, t := range reg.Tenants() {
				if r.Cost > t.Burst {
					errs = append(errs, fmt.Errorf("routes[%d].cost: %v is above tenant %s's burst (%v): such a request could never pass", i, r.Cost, t.ID, t.Burst))
				}
			}
		}
		out.routes.routes = append(out.routes.routes, r)
	}
	out.routes.unmatched = &Route{Name: unmatchedName, Method: "*", Template: "", Cost: 1}
	if c.Global != nil {
		if err := checkQuota("global", *c.Global); err != nil {
			errs = append(errs, err)
		} else {
			out.global = &Limit{Rate: c.Global.Rate, Burst: c.Global.Burst}
			for i, r := range out.routes.routes {
				if r.Cost > c.Global.Burst {
					errs = append(errs, fmt.Errorf("routes[%d].cost: %v is above global.burst (%v): such a request could never pass", i, r.Cost, c.Global.Burst))
				}
			}
		}
	}
	u := defaultUnauthenticated
	if c.Unauthenticated != nil {
		u = *c.Unauthenticated
		if err := checkQuota("unauthenticated", u); err != nil {
			errs = append(errs, err)
		}
	}
	out.unauth = Limit{Rate: u.Rate, Burst: u.Burst}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func checkQuota(field string, q tenant.Quota) error {
	var errs []error
	if !(q.Rate > 0) || q.Rate > 1e9 {
		errs = append(errs, fmt.Errorf("%s.rate: must be > 0 (tokens per second)", field))
	}
	if !(q.Burst >= 1) || q.Burst > 1e12 {
		errs = append(errs, fmt.Errorf("%s.burst: must be >= 1 (tokens)", field))
	}
	return errors.Join(errs...)
}
