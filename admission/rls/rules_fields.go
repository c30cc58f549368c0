package rls

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"gopkg.in/yaml.v3"
)

// role is what a mapping of the schema is.
type role uint8

const (
	roleFile role = iota
	roleDescriptor
	roleRateLimit
	roleReplace
)

// roleFields lists the fields each mapping may hold.
var roleFields = [...][]string{
	roleFile: {"domain", "descriptors"},
	roleDescriptor: {"key", "value", "rate_limit", "shadow_mode", "quota_mode", "detailed_metric",
		"value_to_metric", "share_threshold", "metadata", "descriptors"},
	roleRateLimit: {"name", "replaces", "unit", "requests_per_unit", "unlimited", "window"},
	roleReplace:   {"name"},
}

// homes says where each field of envoyproxy/ratelimit's schema belongs.
// envoyproxy/ratelimit accepts any of its field names in any mapping and
// ignores it where it does not belong; here that is an error which says
// where it belongs, since the setting written there never applied.
var homes = map[string]string{
	"domain": "at the top of the file",
	"key":    "in a descriptor", "value": "in a descriptor", "rate_limit": "in a descriptor",
	"shadow_mode": "in a descriptor", "quota_mode": "in a descriptor", "detailed_metric": "in a descriptor",
	"value_to_metric": "in a descriptor", "share_threshold": "in a descriptor", "metadata": "in a descriptor",
	"descriptors": "in a descriptor or at the top of the file",
	"unit":        "in rate_limit", "requests_per_unit": "in rate_limit", "unlimited": "in rate_limit",
	"replaces": "in rate_limit", "name": "in rate_limit or in an item of replaces",
}

// ownHomes says where each field fairgate adds to the schema belongs:
// envoyproxy/ratelimit refuses a file that has one anywhere.
var ownHomes = map[string]string{"window": "in rate_limit"}

// checkFields walks the document before decoding so that an unknown,
// misplaced or repeated field, or a bad unit, is reported with its path
// (descriptors[2].rate_limit.unit) rather than a line number alone.
// Anchors, aliases and merge keys ("<<") are followed, as
// envoyproxy/ratelimit's YAML reader follows them.
func checkFields(doc *yaml.Node) error {
	n := doc
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return errors.New("empty file")
		}
		n = n.Content[0]
	}
	if n = resolve(n); n.ShortTag() == "!!null" {
		return errors.New("empty file")
	}
	c := fieldChecker{done: make(map[checked]bool)}
	c.mapping(n, "", roleFile)
	return errors.Join(c.errs...)
}

// fieldChecker gathers checkFields' errors.
type fieldChecker struct {
	// done marks the mappings checked in a role, so that a node reached
	// again through an alias is checked once: an alias cycle ends, and
	// aliases of aliases cost no more than the nodes they name.
	done map[checked]bool
	errs []error
}

type checked struct {
	n *yaml.Node
	r role
}

// resolve follows n's alias, if any (an alias never names another alias).
func resolve(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

func (c *fieldChecker) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, args...))
}

func (c *fieldChecker) mapping(n *yaml.Node, path string, r role) {
	n = resolve(n)
	if c.done[checked{n, r}] {
		return
	}
	c.done[checked{n, r}] = true
	if n.Kind != yaml.MappingNode {
		c.fail("%s: line %d: want a mapping", orTop(path), n.Line)
		return
	}
	first := make(map[string]int) // field → its line
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		if k.ShortTag() == "!!merge" {
			c.merge(v, path, r)
			c.mergeOrder(n.Content[:i], v, path, k.Line)
			continue
		}
		field := join(path, k.Value)
		if line, ok := first[k.Value]; ok {
			c.fail("%s: line %d: %q given twice (first at line %d), and envoyproxy/ratelimit silently keeps the last: delete the one you do not mean",
				field, k.Line, k.Value, line)
			continue
		}
		first[k.Value] = k.Line
		if !slices.Contains(roleFields[r], k.Value) {
			if home, ok := ownHomes[k.Value]; ok {
				c.fail("%s: line %d: %q belongs %s: move it there", field, k.Line, k.Value, home)
			} else if home, ok := homes[k.Value]; ok {
				c.fail("%s: line %d: %q belongs %s, and envoyproxy/ratelimit ignores it here: move it there, or delete it to keep what envoyproxy/ratelimit does",
					field, k.Line, k.Value, home)
			} else {
				c.fail("%s: line %d: unknown field %q", field, k.Line, k.Value)
			}
			continue
		}
		c.value(k.Value, v, field)
	}
}

// merge checks the mappings a merge key brings into a mapping of role r.
func (c *fieldChecker) merge(v *yaml.Node, path string, r role) {
	if v.Kind == yaml.SequenceNode {
		for _, item := range v.Content {
			c.mapping(item, path, r)
		}
		return
	}
	c.mapping(v, path, r)
}

// mergeOrder refuses a field written before a merge key that brings it
// too (before, the pairs ahead of the merge key; v, its value): yaml.v2,
// which envoyproxy/ratelimit reads with, takes the merged value, the YAML
// merge key spec (and so yaml.v3) the field's own. Written after the
// merge key, both take the field's own.
func (c *fieldChecker) mergeOrder(before []*yaml.Node, v *yaml.Node, path string, line int) {
	brought := make(map[string]bool)
	mergedKeys(v, brought, make(map[*yaml.Node]bool))
	for i := 0; i+1 < len(before); i += 2 {
		if k := before[i]; brought[k.Value] && k.ShortTag() != "!!merge" {
			c.fail("%s: line %d: %q is written before the << of line %d, which brings it too, and envoyproxy/ratelimit then takes the merged value where YAML takes this one: move << above it",
				join(path, k.Value), k.Line, k.Value, line)
		}
	}
}

// mergedKeys adds to keys the fields a merge key's value v brings.
func mergedKeys(v *yaml.Node, keys map[string]bool, seen map[*yaml.Node]bool) {
	v = resolve(v)
	if seen[v] {
		return
	}
	seen[v] = true
	switch v.Kind {
	case yaml.SequenceNode:
		for _, item := range v.Content {
			mergedKeys(item, keys, seen)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(v.Content); i += 2 {
			if k := v.Content[i]; k.ShortTag() == "!!merge" {
				mergedKeys(v.Content[i+1], keys, seen)
			} else {
				keys[k.Value] = true
			}
		}
	}
}

// value checks the value v of field name at path field.
func (c *fieldChecker) value(name string, v *yaml.Node, field string) {
	null := v.ShortTag() == "!!null"
	switch name {
	case "descriptors", "replaces":
		if null {
			return
		}
		if v.Kind != yaml.SequenceNode {
			c.fail("%s: line %d: want a list", field, v.Line)
			return
		}
		sub := roleDescriptor
		if name == "replaces" {
			sub = roleReplace
		}
		for j, item := range v.Content {
			c.mapping(item, field+"["+strconv.Itoa(j)+"]", sub)
		}
	case "rate_limit":
		if !null {
			c.mapping(v, field, roleRateLimit)
		}
	case "metadata":
		// Any mapping: its content is the user's, not the schema's.
		if !null && v.Kind != yaml.MappingNode {
			c.fail("%s: line %d: want a mapping", field, v.Line)
		}
	case "unit":
		var u Unit
		if null {
			return
		}
		if err := u.UnmarshalText([]byte(v.Value)); err != nil || v.Kind != yaml.ScalarNode {
			c.fail("%s: unknown unit %q", field, v.Value)
		}
	case "window":
		var w Window
		if null {
			return
		}
		if v.Kind != yaml.ScalarNode {
			c.fail("%s: line %d: want fixed or bucket", field, v.Line)
		} else if err := w.UnmarshalText([]byte(v.Value)); err != nil {
			c.fail("%s: line %d: %v", field, v.Line, err)
		}
	case "requests_per_unit":
		// A whole number as YAML writes one (12, 0x10, 1_000); not 12.0
		// nor "12", which envoyproxy/ratelimit refuses too.
		var n uint32
		if null {
			return
		}
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || v.Decode(&n) != nil {
			c.fail("%s: %q is not a whole number from 0 to 4294967295", field, v.Value)
		}
	}
}

func join(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func orTop(path string) string {
	if path == "" {
		return "(top level)"
	}
	return path
}
