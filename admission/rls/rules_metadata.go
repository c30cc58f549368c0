package rls

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"
)

// maxMetadataValues bounds the values one descriptor's metadata expands
// to, aliases followed, so that a file of nested aliases cannot make a
// load take memory without end.
const maxMetadataValues = 10000

// metadataStruct converts a descriptor's metadata, a YAML mapping
// (checkFields saw to that) or nothing, to the protobuf Struct
// envoyproxy/ratelimit puts in a response's dynamic_metadata: nil when
// absent or empty. Values are read as envoyproxy/ratelimit's YAML reader
// reads them (YAML 1.1): numbers become numbers; true, false and the
// unquoted yes, no, on, off, y and n booleans; ~ null; anything else
// text (a date as written, !!binary decoded). Keys are their text as
// written. A merge key ("<<") sets the keys it brings over those before
// it, and the keys after it set theirs over it, in order.
func metadataStruct(n *yaml.Node) (*structpb.Struct, error) {
	if n.Kind == 0 || resolve(n).ShortTag() == "!!null" {
		return nil, nil
	}
	c := metadataReader{left: maxMetadataValues, open: make(map[*yaml.Node]bool)}
	v, err := c.value(n)
	if err != nil {
		return nil, err
	}
	m, _ := v.(map[string]any)
	if len(m) == 0 {
		return nil, nil
	}
	return structpb.NewStruct(m)
}

// metadataReader converts YAML nodes to what structpb.NewValue takes.
type metadataReader struct {
	left int                 // values still allowed (maxMetadataValues)
	open map[*yaml.Node]bool // aliased nodes being read: a cycle
}

func (c *metadataReader) value(n *yaml.Node) (any, error) {
	if c.left--; c.left < 0 {
		return nil, fmt.Errorf("more than %d values, aliases followed", maxMetadataValues)
	}
	switch n.Kind {
	case yaml.AliasNode:
		if c.open[n.Alias] {
			return nil, fmt.Errorf("line %d: alias *%s holds itself", n.Line, n.Value)
		}
		c.open[n.Alias] = true
		defer delete(c.open, n.Alias)
		return c.value(n.Alias)
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return c.value(n.Content[0])
	case yaml.SequenceNode:
		out := make([]any, len(n.Content))
		for i, e := range n.Content {
			v, err := c.value(e)
			if err != nil {
				return nil, err
			}
			out[i] = v
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		return out, c.fill(out, n)
	}
	return scalar(n)
}

// fill sets the pairs of mapping n in out, in order.
func (c *metadataReader) fill(out map[string]any, n *yaml.Node) error {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.ShortTag() == "!!merge" {
			if err := c.merge(out, v); err != nil {
				return err
			}
			continue
		}
		if k.Kind != yaml.ScalarNode {
			return fmt.Errorf("line %d: a key must be text, not a mapping or a list", k.Line)
		}
		val, err := c.value(v)
		if err != nil {
			return err
		}
		key := k.Value
		if k.ShortTag() == "!!null" {
			key = ""
		}
		out[key] = val
	}
	return nil
}

// merge sets in out the pairs of the mapping, or list of mappings, that a
// merge key brings: an earlier mapping of a list over a later one.
func (c *metadataReader) merge(out map[string]any, v *yaml.Node) error {
	v = resolve(v)
	items := []*yaml.Node{v}
	if v.Kind == yaml.SequenceNode {
		items = v.Content
	}
	for i := len(items) - 1; i >= 0; i-- {
		m, err := c.value(items[i])
		if err != nil {
			return err
		}
		mm, ok := m.(map[string]any)
		if !ok {
			return fmt.Errorf("line %d: <<: want a mapping or a list of them", items[i].Line)
		}
		for k, e := range mm {
			out[k] = e
		}
	}
	return nil
}

// plainStyles are the styles that make a scalar text whatever it reads.
const plainStyles = yaml.TaggedStyle | yaml.DoubleQuotedStyle | yaml.SingleQuotedStyle | yaml.LiteralStyle | yaml.FoldedStyle

// scalar converts one scalar as YAML 1.1 reads it.
func scalar(n *yaml.Node) (any, error) {
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!bool", "!!int", "!!float":
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, cleanDecodeError(err)
		}
		return v, nil
	case "!!binary":
		b, err := base64.StdEncoding.DecodeString(strings.Join(strings.Fields(n.Value), ""))
		if err != nil {
			return nil, fmt.Errorf("line %d: !!binary: %w", n.Line, err)
		}
		return string(b), nil
	case "!!str":
		if n.Style&plainStyles == 0 {
			switch n.Value {
			case "y", "Y", "yes", "Yes", "YES", "on", "On", "ON":
				return true, nil
			case "n", "N", "no", "No", "NO", "off", "Off", "OFF":
				return false, nil
			}
		}
	}
	if n.Kind != yaml.ScalarNode {
		return nil, errors.New("not a YAML value")
	}
	return n.Value, nil
}
