package rls

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/errprefix"
)

// Rules are the compiled descriptor trees of every configured domain. A
// Rules is immutable once built, so decisions read it without a lock and a
// reload swaps the whole value.
type Rules struct {
	domains map[string]*level
}

// Domains returns the configured domains, sorted.
func (r *Rules) Domains() []string {
	out := make([]string, 0, len(r.domains))
	for d := range r.domains {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// level is the children of one node: by key and value, by key and value
// prefix (longest first), and by key alone.
type level struct {
	exact map[entryKey]*node
	wild  []*node // value ends in "*"; sorted by prefix length, longest first
	byKey map[string]*node
	// tag is, on a domain's top level, the Tenant of the domain's buckets
	// (domainTag), made once rather than per call.
	tag string
}

type entryKey struct{ key, value string }

// node is one configured descriptor.
type node struct {
	key, value string // value "" means any; a trailing "*" a prefix
	// path names the node in metrics and spans: the configured keys and
	// values from the domain down ("remote_address", "path=/foo.method"),
	// bounded by the config whatever the requests send.
	path     string
	limit    *rule // nil: no rate_limit here
	shadow   bool
	children level
}

// rule is a compiled rate_limit.
type rule struct {
	// name is the policy name (rate_limit.name, else the node's path).
	name            string
	configuredName  string // rate_limit.name as written; replaces refers to it
	replaces        []string
	unit            Unit
	requestsPerUnit uint32
	unlimited       bool
	// unitMultiplier is a request-level override's multiplier of unit
	// (window = unit × multiplier); 0 or 1 means none.
	unitMultiplier uint32
	// limit is the token bucket: burst requestsPerUnit refilled over one
	// unit.
	limit ratelimit.Limit
	// window is the unit's length.
	window time.Duration
}

// newRule returns the rule of requests per window, named name.
func newRule(name string, rpu uint32, u Unit, window time.Duration) *rule {
	r := &rule{name: name, unit: u, requestsPerUnit: rpu, window: window}
	if rpu > 0 {
		r.limit = ratelimit.Limit{Rate: float64(rpu) / window.Seconds(), Burst: float64(rpu)}
	}
	return r
}

// LoadRules reads every config file at paths: a file is read whatever its
// name; a folder's *.yaml and *.yml files are read (not its subfolders, nor
// dotfiles such as Kubernetes' ..data swap folders). Errors name the file
// and the field; every error is reported, not only the first.
func LoadRules(paths []string) (*Rules, error) {
	var files []string
	var errs []error
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("rls: %w", err))
			continue
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		ents, err := os.ReadDir(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("rls: %w", err))
			continue
		}
		for _, e := range ents {
			n := e.Name()
			if strings.HasPrefix(n, ".") || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
				continue
			}
			fp := filepath.Join(p, n)
			if st, err := os.Stat(fp); err == nil && !st.IsDir() {
				files = append(files, fp)
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	srcs := make([]Source, 0, len(files))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("rls: %w", err))
			continue
		}
		srcs = append(srcs, Source{Name: f, Data: b})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return ParseRules(srcs...)
}

// Source is one config file's name (for errors) and content.
type Source struct {
	Name string
	Data []byte
}

// ParseRules compiles config files. A domain may appear in one file only.
func ParseRules(srcs ...Source) (*Rules, error) {
	r := &Rules{domains: make(map[string]*level)}
	from := make(map[string]string)
	var errs []error
	for _, s := range srcs {
		f, err := parseFile(s.Data)
		if err != nil {
			errs = append(errs, prefixLines(s.Name, err))
			continue
		}
		lvl, err := compileFile(f)
		if err != nil {
			errs = append(errs, prefixLines(s.Name, err))
			continue
		}
		if prev, ok := from[f.Domain]; ok {
			errs = append(errs, fmt.Errorf("%s: domain: %q is already configured in %s", s.Name, f.Domain, prev))
			continue
		}
		from[f.Domain] = s.Name
		lvl.tag = domainTag(f.Domain)
		r.domains[f.Domain] = lvl
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return r, nil
}

// prefixLines puts "name: " before each line of err's message, keeping
// err (errprefix.Lines).
func prefixLines(name string, err error) error { return errprefix.Lines(name, err) }

// compileFile validates f and builds its tree.
func compileFile(f fileConfig) (*level, error) {
	var errs []error
	if f.Domain == "" {
		errs = append(errs, errors.New("domain: required"))
	}
	lvl, err := compileLevel(f.Descriptors, "descriptors", "")
	if err != nil {
		errs = append(errs, err)
	}
	return lvl, errors.Join(errs...)
}

func compileLevel(ds []descriptorConfig, field, parentPath string) (*level, error) {
	lvl := &level{}
	var errs []error
	for i, d := range ds {
		f := field + "[" + strconv.Itoa(i) + "]"
		if d.Key == "" {
			errs = append(errs, fmt.Errorf("%s.key: required", f))
			continue
		}
		n := &node{key: d.Key, value: d.Value, shadow: d.ShadowMode, path: d.Key}
		if d.Value != "" {
			n.path += "=" + d.Value
		}
		if parentPath != "" {
			n.path = parentPath + "." + n.path
		}
		if d.RateLimit != nil {
			rl, err := compileRule(*d.RateLimit, f+".rate_limit", n.path)
			if err != nil {
				errs = append(errs, err)
			}
			n.limit = rl
		}
		children, err := compileLevel(d.Descriptors, f+".descriptors", n.path)
		if err != nil {
			errs = append(errs, err)
		}
		if children != nil {
			n.children = *children
		}
		if err := lvl.add(n); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f, err))
		}
	}
	slices.SortStableFunc(lvl.wild, func(a, b *node) int { return cmp.Compare(len(b.value), len(a.value)) })
	return lvl, errors.Join(errs...)
}

func compileRule(c rateLimitConfig, field, path string) (*rule, error) {
	var errs []error
	for j, rp := range c.Replaces {
		if rp.Name == "" {
			errs = append(errs, fmt.Errorf("%s.replaces[%d].name: required", field, j))
		}
	}
	if c.Unlimited {
		if c.Unit != UnitNone || c.RequestsPerUnit != 0 {
			errs = append(errs, fmt.Errorf("%s: unlimited: true takes no unit or requests_per_unit", field))
		}
	} else if c.Unit == UnitNone {
		errs = append(errs, fmt.Errorf("%s.unit: required (second, minute, hour, day, week, month or year)", field))
	}
	name := c.Name
	if name == "" {
		name = path
	}
	r := newRule(name, c.RequestsPerUnit, c.Unit, c.Unit.Duration())
	r.configuredName, r.unlimited = c.Name, c.Unlimited
	for _, rp := range c.Replaces {
		r.replaces = append(r.replaces, rp.Name)
	}
	return r, errors.Join(errs...)
}

// add puts n in lvl; two nodes with the same key and value are an error.
func (lvl *level) add(n *node) error {
	dup := fmt.Errorf("key %q value %q: configured twice at this level", n.key, n.value)
	switch {
	case n.value == "":
		if lvl.byKey == nil {
			lvl.byKey = make(map[string]*node)
		}
		if lvl.byKey[n.key] != nil {
			return dup
		}
		lvl.byKey[n.key] = n
	case strings.HasSuffix(n.value, "*"):
		for _, w := range lvl.wild {
			if w.key == n.key && w.value == n.value {
				return dup
			}
		}
		lvl.wild = append(lvl.wild, n)
	default:
		if lvl.exact == nil {
			lvl.exact = make(map[entryKey]*node)
		}
		k := entryKey{n.key, n.value}
		if lvl.exact[k] != nil {
			return dup
		}
		lvl.exact[k] = n
	}
	return nil
}

// child returns the node that entry (key, value) reaches from lvl, most
// specific first, or nil.
func (lvl *level) child(key, value string) *node {
	if n := lvl.exact[entryKey{key, value}]; n != nil {
		return n
	}
	for _, w := range lvl.wild {
		if w.key == key && strings.HasPrefix(value, w.value[:len(w.value)-1]) {
			return w
		}
	}
	return lvl.byKey[key]
}
