package gateway

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/fairgate/fairgate/internal/errprefix"
	"github.com/fairgate/fairgate/internal/suggest"
)

// prefixLines puts "path: " before each line of err's message, keeping
// err (errprefix.Lines).
func prefixLines(path string, err error) error { return errprefix.Lines(path, err) }

// cleanYAMLError makes yaml.v3's decoding errors, which name neither the
// file nor the field, name what is wrong: the field by its dotted path,
// beside the line (load puts the file before each, prefixLines), and the
// nearest field the type has. A person reads "routes[2].max_concurent:
// unknown field (line 63); did you mean `max_concurrent`?" rather than
// "line 63: field max_concurent not found in type
// admission.RouteConfig". An error yaml.v3 gives without a line (a value
// an UnmarshalText refused, such as a criticality typo) is placed by the
// quoted value it names.
func cleanYAMLError(err error, data []byte) error {
	var doc yaml.Node
	_ = yaml.Unmarshal(data, &doc) // it decoded once already; a failure leaves no paths
	paths := map[int][]string{}    // line -> paths of the keys on it, in order
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

// walkPaths records the path of every mapping key by its line (several on
// the line of a flow mapping, {share: 1, max_wait: 2s}), and every scalar
// value with its path.
func walkPaths(n *yaml.Node, path string, paths map[int][]string, values *[]scalarAt) {
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
			paths[k.Line] = append(paths[k.Line], p)
			walkPaths(v, p, paths, values)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			if c.Kind == yaml.ScalarNode {
				paths[c.Line] = append(paths[c.Line], p)
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
func nameField(e string, paths map[int][]string) string {
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
	hint, name := "", "" // for an unknown field: did you mean, and its name
	if f, ok := strings.CutPrefix(msg, "field "); ok {
		if n, typ, ok := strings.Cut(f, " not found in type "); ok {
			msg, hint, name = "unknown field", suggest.DidYouMean(n, fieldNames()[typ]), n
		}
	}
	if strings.Contains(msg, "into time.Duration") {
		msg += " (a duration needs a unit: 10s, 500ms, 2m)"
	}
	if p := pathOn(paths[line], name); p != "" {
		return fmt.Sprintf("%s: %s (line %d)%s", p, msg, line, hint)
	}
	return fmt.Sprintf("line %d: %s%s", line, msg, hint)
}

// pathOn picks, of the paths of the keys on a line, the one of the field
// named field, else the last (a line holds one key unless it holds a flow
// mapping).
func pathOn(paths []string, field string) string {
	for _, p := range paths {
		if p == field || strings.HasSuffix(p, "."+field) && field != "" {
			return p
		}
	}
	if len(paths) == 0 {
		return ""
	}
	return paths[len(paths)-1]
}

// fieldNames is, per Go type of the config as yaml.v3 names it in an
// unknown-field error ("tenant.TierConfig"), the field names the file may
// use there, sorted: read from the yaml tags of Config and of every struct
// it holds, so that a field added to a Config is suggested with no list to
// keep in step.
var fieldNames = sync.OnceValue(func() map[string][]string {
	names := map[string][]string{}
	addFieldNames(reflect.TypeFor[Config](), names)
	for t, ns := range names {
		slices.Sort(ns)
		names[t] = slices.Compact(ns)
	}
	return names
})

// textUnmarshaler is what a type decodes itself with when it holds a word
// (shed.Criticality): its fields are none of the file's business.
var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// addFieldNames records t's field names, and those of the structs it
// holds, as yaml.v3 decodes them: a field's tag name, else its name in
// lower case; an inline struct's fields as the holder's own.
func addFieldNames(t reflect.Type, names map[string][]string) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return
	}
	if _, done := names[t.String()]; done {
		return
	}
	names[t.String()] = []string{}
	addFields(t, t.String(), names)
}

// addFields adds the fields of struct t to names[holder], and walks the
// types they hold.
func addFields(t reflect.Type, holder string, names map[string][]string) {
	for f := range t.Fields() {
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if tag == "-" || !f.IsExported() {
			continue
		}
		if slices.Contains(strings.Split(opts, ","), "inline") {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				addFields(ft, holder, names)
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		names[holder] = append(names[holder], name)
		addFieldNames(f.Type, names)
	}
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
	if path == "" || strings.HasPrefix(msg, path+": ") {
		return err // unplaced, or the error names its field itself (encoded_slashes)
	}
	return fmt.Errorf("%s: %w", path, err)
}
