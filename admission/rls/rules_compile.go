package rls

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// compileFile validates f, a file named src, and adds its descriptors to
// lvl (a new level, or the domain's level of an earlier file when merging).
func compileFile(f fileConfig, lvl *level, src string) error {
	var errs []error
	if f.Domain == "" {
		errs = append(errs, errors.New("domain: required"))
	}
	if err := compileLevel(lvl, f.Descriptors, "descriptors", "", 0, nil, src); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// compileLevel adds ds, the descriptors at field, to lvl: the children of
// the node at parentPath, depth levels below the domain. shared is the
// share_threshold wildcards of the entries above (nil when none share).
func compileLevel(lvl *level, ds []descriptorConfig, field, parentPath string, depth int, shared []string, src string) error {
	var errs []error
	for i, d := range ds {
		f := field + "[" + strconv.Itoa(i) + "]"
		if d.Key == "" {
			errs = append(errs, fmt.Errorf("%s.key: required", f))
			continue
		}
		n := &node{key: d.Key, value: d.Value, shadow: d.ShadowMode, path: d.Key, src: src, field: f}
		if d.Value != "" {
			n.path += "=" + d.Value
		}
		if parentPath != "" {
			n.path = parentPath + "." + n.path
		}
		// The text envoyproxy/ratelimit matches a wildcard by, and keys a
		// shared bucket by: key and value joined by "_".
		joined := d.Key
		if d.Value != "" {
			joined += "_" + d.Value
		}
		switch {
		case strings.Contains(d.Key, "*"):
			n.pat = compilePattern(joined, true)
		case strings.Contains(d.Value, "*"):
			n.pat = compilePattern(d.Value, false)
		}
		if d.ShareThreshold && n.pat == nil {
			errs = append(errs, fmt.Errorf(`%s.share_threshold: true needs a wildcard value (one with "*"), and value %q has none: add the "*" or delete share_threshold`, f, d.Value))
		}
		sh := shareChain(shared, depth, d.ShareThreshold && n.pat != nil, joined)
		md, err := metadataStruct(&d.Metadata)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.metadata: %w", f, err))
		}
		if d.RateLimit != nil {
			rl, err := compileRule(*d.RateLimit, f+".rate_limit", n.path)
			if err != nil {
				errs = append(errs, err)
			}
			// quota_mode and metadata are the descriptor's fields but
			// take effect with its rate_limit only, as in
			// envoyproxy/ratelimit.
			rl.quotaMode, rl.metadata, rl.shared = d.QuotaMode, md, sh
			n.limit = rl
		}
		if err := compileLevel(&n.children, d.Descriptors, f+".descriptors", n.path, depth+1, sh, src); err != nil {
			errs = append(errs, err)
		}
		if err := lvl.add(n); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f, err))
		}
	}
	return errors.Join(errs...)
}

// shareChain returns the shared wildcards of a node depth levels down,
// whose parent's are parent: nil when neither it (share) nor any node
// above shares, else one item per level, wildcard at depth when share.
func shareChain(parent []string, depth int, share bool, wildcard string) []string {
	if parent == nil && !share {
		return nil
	}
	out := make([]string, depth+1)
	copy(out, parent)
	if share {
		out[depth] = wildcard
	}
	return out
}

func compileRule(c rateLimitConfig, field, path string) (*rule, error) {
	var errs []error
	for j, rp := range c.Replaces {
		switch {
		case rp.Name == "":
			errs = append(errs, fmt.Errorf("%s.replaces[%d].name: required", field, j))
		case rp.Name == c.Name:
			errs = append(errs, fmt.Errorf("%s.replaces[%d].name: %q is this rate limit's own name, and a limit that replaces itself never applies: name the limit it replaces", field, j, rp.Name))
		}
	}
	rpu := c.RequestsPerUnit
	if c.Unlimited {
		if c.Unit != UnitNone {
			errs = append(errs, fmt.Errorf("%s.unit: an unlimited rate limit has no unit: delete unit, or unlimited: true", field))
		}
		if c.Window != WindowDefault {
			errs = append(errs, fmt.Errorf("%s.window: an unlimited rate limit has no window: delete window, or unlimited: true", field))
		}
		// requests_per_unit beside unlimited: true is ignored, as
		// envoyproxy/ratelimit ignores it.
		rpu = 0
	} else if c.Unit == UnitNone {
		errs = append(errs, fmt.Errorf("%s.unit: required (second, minute, hour, day, week, month or year)", field))
	}
	name := c.Name
	if name == "" {
		name = path
	}
	r := newRule(name, rpu, c.Unit, c.Unit.Duration())
	r.configuredName, r.unlimited, r.mode = c.Name, c.Unlimited, c.Window
	for _, rp := range c.Replaces {
		r.replaces = append(r.replaces, rp.Name)
	}
	return r, errors.Join(errs...)
}

// add puts n in lvl; two nodes with the same key and value are an error.
func (lvl *level) add(n *node) error {
	var prev *node
	if n.value == "" {
		if lvl.byKey == nil {
			lvl.byKey = make(map[string]*node)
		}
		if prev = lvl.byKey[n.key]; prev == nil {
			lvl.byKey[n.key] = n
		}
	} else {
		if lvl.exact == nil {
			lvl.exact = make(map[entryKey]*node)
		}
		k := entryKey{n.key, n.value}
		if prev = lvl.exact[k]; prev == nil {
			lvl.exact[k] = n
		}
	}
	if prev != nil {
		err := fmt.Errorf("key %q value %q: configured twice at this level", n.key, n.value)
		if prev.src != n.src {
			err = fmt.Errorf("%w (first in %s, %s)", err, prev.src, prev.field)
		}
		return err
	}
	if n.pat != nil {
		lvl.wild = append(lvl.wild, n)
	}
	return nil
}
