package gateway

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/fairgate/fairgate/internal/errprefix"
)

// prefixLines puts "path: " before each line of err's message, keeping
// err (errprefix.Lines).
func prefixLines(path string, err error) error { return errprefix.Lines(path, err) }

// cleanYAMLError makes yaml.v3's decoding errors, which name neither the
// file nor the field, name what is wrong: the field by its dotted path,
// beside the line (load puts the file before each, prefixLines). A person
// reads "routes[2].max_concurent: unknown field (line 63)" rather than
// "line 63: field max_concurent not found in type
// admission.RouteConfig". An error yaml.v3 gives without a line (a value
// an UnmarshalText refused, such as a criticality typo) is placed by the
// quoted value it names.
func cleanYAMLError(err error, data []byte) error {
	var doc yaml.Node
	_ = yaml.Unmarshal(data, &doc) // it decoded once already; a failure leaves no paths
	paths := map[int]string{}      // line -> path of the key on it
	var values []scalarAt
	if len(doc.Content) > 0 {
		walkPaths(doc.Content[0], "", paths, &values)
	}
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return placeByValue(err, values)
	}
	out := make([]string, 0, len(te.Errors))
	for _, e := range te.Errors {
		out = append(out, nameField(e, paths))
	}
	return errors.New(strings.Join(out, "\n"))
}

// scalarAt is a scalar value of the document and the path of its field.
type scalarAt struct{ value, path string }

// walkPaths records the path of every mapping key by its line, and every
// scalar value with its path.
func walkPaths(n *yaml.Node, path string, paths map[int]string, values *[]scalarAt) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if !simpleKey(p) {
				p = strconv.Quote(p)
			}
			if path != "" {
				p = path + "." + p
			}
			paths[k.Line] = p
			walkPaths(v, p, paths, values)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if c.Kind == yaml.ScalarNode {
				paths[c.Line] = p
			}
			walkPaths(c, p, paths, values)
		}
	case yaml.ScalarNode:
		*values = append(*values, scalarAt{n.Value, path})
	}
}

// simpleKey reports whether a key can stand in a path unquoted.
func simpleKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// nameField rewrites one "line N: …" error of yaml.v3 as "PATH: … (line N)".
func nameField(e string, paths map[int]string) string {
	var line int
	rest, ok := strings.CutPrefix(e, "line ")
	if !ok {
		return e
	}
	num, msg, ok := strings.Cut(rest, ": ")
	if n, err := strconv.Atoi(num); ok && err == nil {
		line = n
	} else {
		return e
	}
	if i := strings.Index(msg, "field "); i == 0 && strings.Contains(msg, " not found in type ") {
		msg = "unknown field"
	}
	if strings.Contains(msg, "into time.Duration") {
		msg += " (a duration needs a unit: 10s, 500ms, 2m)"
	}
	if p := paths[line]; p != "" {
		return fmt.Sprintf("%s: %s (line %d)", p, msg, line)
	}
	return fmt.Sprintf("line %d: %s", line, msg)
}

// placeByValue prefixes err with the path of the one field whose value it
// quotes, when there is exactly one.
func placeByValue(err error, values []scalarAt) error {
	msg := err.Error()
	_, q, ok := strings.Cut(msg, `"`)
	if !ok {
		return err
	}
	v, _, ok := strings.Cut(q, `"`)
	if !ok {
		return err
	}
	path := ""
	for _, s := range values {
		if s.value == v {
			if path != "" {
				return err // more than one: do not guess
			}
			path = s.path
		}
	}
	if path == "" {
		return err
	}
	return fmt.Errorf("%s: %w", path, err)
}
