package admission

import (
	"fmt"
	"net/url"
	"path"
	"strings"

	"github.com/fairgate/fairgate/shed"
)

// RouteConfig describes one route: a method and a path template, its cost in
// tokens and how critical it is.
type RouteConfig struct {
	// Method is the HTTP method ("GET", "POST", …) or "*" for any.
	Method string `yaml:"method"`
	// Path is a template: literal segments, "{name}" for any one segment,
	// and a final "*" for any remainder ("/api/v1/users/{id}",
	// "/static/*"). Buckets and metrics are keyed by the template, never by
	// the raw path.
	Path string `yaml:"path"`
	// Cost is the number of tokens a request takes. Must be >= 1 and no
	// larger than any tier's burst. Zero means 1.
	Cost float64 `yaml:"cost"`
	// Criticality is critical, default or sheddable. Default: default.
	Criticality shed.Criticality `yaml:"criticality"`
	// Group, when set, charges the route also to the tenant's bucket for
	// that group, whose quota each tier sets under tiers.NAME.groups.
	Group string `yaml:"group"`
	// Pool, when set, sends the route to its own bulkhead pool instead of
	// the tier's.
	Pool string `yaml:"pool"`
	// Auth is "key" (the default: the request must identify a tenant) or
	// "none", for routes that need no credentials by design (CORS
	// preflight, health checks): their requests are limited per client IP
	// by the anonymous bucket and the adaptive limit, not by a tenant's
	// quotas, so keep them cheap.
	Auth RouteAuth `yaml:"auth"`
	// Shadow puts the route's rate quotas (the tenant's bucket, the
	// group's, the tenant's limits) in shadow mode for its requests: they
	// decide and take tokens as usual, but a request they would refuse is
	// admitted and counted as a would-be rejection. False (the default)
	// leaves it to the tenant's tier and entry.
	Shadow bool `yaml:"shadow"`
	// Exempt passes the route's requests through every shared layer
	// (the global backstop, shedding, the bulkhead pools and the adaptive
	// limit) without waiting, as Kubernetes API Priority and Fairness's
	// exempt priority level does: health checks, the control plane. They
	// are still identified, charged to their tenant's own quotas and cap,
	// counted (outcome exempt) and traced. Keep such routes cheap: nothing
	// shared protects the upstream from them.
	Exempt bool `yaml:"exempt"`
	// Settle makes the route's cost the upstream's usage: the reserve
	// is taken at admission, the difference settled once it answered
	// (see SettleConfig). Cost is then unset.
	Settle *SettleConfig `yaml:"settle"`
	// ChargeOnStatus charges the route's cost (or settled usage) only
	// when the upstream answers one of these statuses, and refunds it
	// otherwise: charge_on_status: [401, 403] makes failed logins cost
	// and successful ones free.
	ChargeOnStatus []StatusRange `yaml:"charge_on_status"`
}

// RouteAuth is what a route asks of a request's credentials.
type RouteAuth uint8

const (
	// AuthKey: the request must present a tenant's API key.
	AuthKey RouteAuth = iota
	// AuthNone: no credentials; limited per client IP.
	AuthNone
)

// UnmarshalText parses "key" or "none" (empty means key) and rejects
// anything else.
func (a *RouteAuth) UnmarshalText(b []byte) error {
	switch string(b) {
	case "", "key":
		*a = AuthKey
	case "none":
		*a = AuthNone
	default:
		return fmt.Errorf("%q is not key or none", b)
	}
	return nil
}

// Route is a compiled RouteConfig. Routes are shared and must not be
// modified.
type Route struct {
	// Name is "METHOD /template", the label used in metrics and spans.
	Name        string
	Method      string
	Template    string
	Cost        float64
	Criticality shed.Criticality
	Group       string
	Pool        string
	// Anonymous routes (auth: none) identify no tenant.
	Anonymous bool
	// Shadow: the rate quotas decide this route's requests without
	// refusing them.
	Shadow bool
	// Exempt: the route's requests pass the shared layers (RouteConfig.Exempt).
	Exempt bool
	// settle is the route's settlement; nil when its cost is fixed.
	settle *settlement
	// class is the route's latency class for the adaptive limit: its
	// index in the config from 1; 0 for unmatched requests.
	class int
	segs  []string // template segments; anySegment matches any one
	rest  bool     // a final "*" matches the remainder
}

// unmatchedName is the route of requests that match no configured route:
// cost 1, default criticality, one metric label however many paths there are.
const unmatchedName = "unmatched"

func compileRoute(rc RouteConfig, i int) (*Route, error) {
	f := fmt.Sprintf("routes[%d]", i)
	m := strings.ToUpper(strings.TrimSpace(rc.Method))
	if m == "" {
		return nil, fmt.Errorf("%s.method: required (GET, POST, … or *)", f)
	}
	for _, c := range m {
		if !(c >= 'A' && c <= 'Z' || c == '*') {
			return nil, fmt.Errorf("%s.method: %q is not an HTTP method", f, rc.Method)
		}
	}
	if !strings.HasPrefix(rc.Path, "/") {
		return nil, fmt.Errorf("%s.path: must start with '/' (got %q)", f, rc.Path)
	}
	st, cost, err := compileSettle(f, rc)
	if err != nil {
		return nil, err
	}
	if cost == 0 {
		cost = 1
	}
	if !(cost >= 1) || cost > 1e9 {
		return nil, fmt.Errorf("%s.cost: must be >= 1 (tokens)", f)
	}
	r := &Route{Name: m + " " + rc.Path, Method: m, Template: rc.Path, Cost: cost, class: i + 1,
		Criticality: rc.Criticality, Group: rc.Group, Pool: rc.Pool, Anonymous: rc.Auth == AuthNone, Shadow: rc.Shadow, Exempt: rc.Exempt, settle: st}
	if rc.Auth > AuthNone {
		return nil, fmt.Errorf("%s.auth: unknown value %d (key or none)", f, rc.Auth)
	}
	if r.Anonymous && (r.Group != "" || r.Pool != "" || r.Shadow) {
		return nil, fmt.Errorf("%s.auth: a route with auth: none has no tenant, so no group, pool or shadow", f)
	}
	parts := strings.Split(strings.TrimPrefix(rc.Path, "/"), "/")
	for j, p := range parts {
		// Requests are classified as path.Clean makes them, so these
		// could never match.
		switch {
		case rc.Path == "/":
		case p == "" && j == len(parts)-1:
			return nil, fmt.Errorf("%s.path: %q ends in '/', which no request is classified as: drop it (\"/a/\" is classified as \"/a\")", f, rc.Path)
		case p == "":
			return nil, fmt.Errorf("%s.path: %q has an empty segment (\"//\"), which no request is classified as", f, rc.Path)
		case p == "." || p == "..":
			return nil, fmt.Errorf("%s.path: %q has a %q segment, which no request is classified as", f, rc.Path, p)
		case strings.ContainsAny(p, ";\x01"):
			return nil, fmt.Errorf("%s.path: segment %q: ';' starts parameters, which are dropped before classifying", f, p)
		}
		switch {
		case p == "*" && j == len(parts)-1:
			r.rest = true
		case strings.HasPrefix(p, "{") && strings.HasSuffix(p, "}") && len(p) > 2:
			r.segs = append(r.segs, anySegment)
		case strings.ContainsAny(p, "{}*"):
			return nil, fmt.Errorf("%s.path: segment %q: use {name} for one segment or a final * for the rest", f, p)
		default:
			r.segs = append(r.segs, p)
		}
	}
	return r, nil
}

// match reports whether the route matches method and path. It allocates
// nothing.
func (r *Route) match(method, path string) bool {
	if r.Method != "*" && r.Method != method {
		return false
	}
	if path == "" || path[0] != '/' {
		return false
	}
	rest, ended := path[1:], false
	for _, seg := range r.segs {
		if ended {
			return false
		}
		part := rest
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			part, rest = rest[:j], rest[j+1:]
		} else {
			rest, ended = "", true
		}
		if seg == anySegment {
			if part == "" {
				return false
			}
		} else if !strings.EqualFold(part, seg) {
			return false
		}
	}
	if r.rest {
		return !ended
	}
	return ended
}

// anySegment marks a "{name}" template segment.
const anySegment = "\x00"

// routeTable matches requests to routes, first configured first.
type routeTable struct {
	routes    []*Route
	unmatched *Route
}

// lookup returns the route of a request: the first that matches, or the
// unmatched route. Every spelling of a path that an upstream framework may
// serve as the same route is classified as that route, so that spelling a
// path differently never makes an expensive route cheap (the request itself
// is forwarded as the client sent it):
//
//   - the method is compared in upper case ("post" is POST);
//   - the path is classified as path.Clean makes it ("//a/./b/" is "/a/b"),
//     after dropping each segment's ";parameters" ("/export;jsessionid=1"
//     is "/export", as servlet containers read it);
//   - literal segments match regardless of case;
//   - raw, when set, is the path as sent (URL.RawPath): an escaped '/'
//     ("%2F") then stays inside its segment, so "/items/a%2Fb" is one
//     {id}, as an upstream routing on the escaped path sees it.
//
// It allocates only when the request is spelled unusually.
func (t *routeTable) lookup(method, p, raw string) *Route {
	method = upperASCII(method)
	if raw != "" && hasEncodedSlash(raw) {
		p = segmentsOf(raw)
	}
	if strings.IndexByte(p, ';') >= 0 {
		p = dropParams(p)
	}
	if p != "/" {
		p = path.Clean(p) // allocates only when the path was not clean
	}
	for _, r := range t.routes {
		if r.match(method, p) {
			return r
		}
	}
	return t.unmatched
}

// upperASCII returns s in upper case, allocating only when s has a lower
// case letter.
func upperASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if 'a' <= s[i] && s[i] <= 'z' {
			return strings.ToUpper(s)
		}
	}
	return s
}

// hasEncodedSlash reports whether an escaped path holds "%2F" or "%2f".
func hasEncodedSlash(raw string) bool {
	for i := 0; i+2 < len(raw); i++ {
		if raw[i] == '%' && raw[i+1] == '2' && (raw[i+2] == 'F' || raw[i+2] == 'f') {
			return true
		}
	}
	return false
}

// segmentSlash stands for a '/' that was escaped inside a segment. No
// template segment holds it, so it matches only {name} and a final *.
const segmentSlash = "\x01"

// segmentsOf returns the escaped path raw unescaped segment by segment, each
// escaped '/' replaced by segmentSlash so that it stays inside its segment.
func segmentsOf(raw string) string {
	segs := strings.Split(raw, "/")
	for i, seg := range segs {
		if u, err := url.PathUnescape(seg); err == nil {
			seg = u
		}
		segs[i] = strings.ReplaceAll(seg, "/", segmentSlash)
	}
	return strings.Join(segs, "/")
}

// dropParams removes each segment's ";parameters" from p.
func dropParams(p string) string {
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); {
		c := p[i]
		if c != ';' {
			b.WriteByte(c)
			i++
			continue
		}
		for i < len(p) && p[i] != '/' {
			i++
		}
	}
	return b.String()
}
