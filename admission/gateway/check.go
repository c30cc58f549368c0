package gateway

import (
	"bytes"
	"errors"
	"os"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Check is Load for a person fixing a config file (`fairgate check-config`),
// with parse one of Parse, ParseEmbedded or ParseRLS. A config Load accepts
// Check returns as Load does. For one Load refuses, Check reports every
// problem it can find in one run, where Load stops at the first stage that
// fails: a misspelt field (yaml.v3's strict decoding) hides every semantic
// error, and a misspelt word (a criticality) hides the rest of the file
// from the decoder. So Check takes out what could not be decoded — the
// unknown fields, and a word no type accepts, which then takes its
// default — and parses again with the same parse, until what is left
// decodes; the errors of every pass are reported (each once), the decoding
// ones first, each line prefixed with path as Load's. Nothing taken out is
// ever accepted: the error names it.
func Check(path string, parse func([]byte) (Config, error)) (Config, error) {
	c, err := load(path, parse)
	if err == nil {
		return c, nil
	}
	data, rerr := os.ReadFile(path)
	if rerr != nil {
		return c, err
	}
	return Config{}, prefixLines(path, parseAll(data, parse))
}

// maxPasses bounds parseAll: each pass takes out at least one field.
const maxPasses = 50

// parseAll parses data with parse, taking out what did not decode and
// parsing again until it decodes or nothing more can be taken out, and
// returns every error of every pass, once each. It is nil only if data
// parses.
func parseAll(data []byte, parse func([]byte) (Config, error)) error {
	var lines []string
	seen := map[string]bool{}
	for range maxPasses {
		_, err := parse(data)
		if err == nil {
			break
		}
		for _, l := range strings.Split(err.Error(), "\n") {
			if !seen[l] {
				seen[l] = true
				lines = append(lines, l)
			}
		}
		next, ok := withoutUndecodable(data)
		if !ok {
			break
		}
		data = next
	}
	if len(lines) == 0 {
		return nil
	}
	return errors.New(strings.Join(lines, "\n"))
}

// unknownField is yaml.v3's error for a field its type lacks (the test of
// Check's "every error in one run" fails if yaml.v3 words it otherwise).
var unknownField = regexp.MustCompile(`^line (\d+): field (.+) not found in type \S+$`)

// withoutUndecodable returns data without what stops it decoding, and
// whether anything could be taken out (false when data decodes, or fails
// for a reason that taking a field out would not mend: a syntax error, a
// value of the wrong type, which would then read as missing).
//
// Unknown fields are all reported in one decode, so they come out together,
// from the document's tree, whose lines no later decoding error needs: once
// they are out, the document decodes. A word refused by a type's
// UnmarshalText stops the decoder where it stands, so it is blanked in
// place in the text (the empty word is every such type's default), leaving
// every line where it was for the errors the next pass finds below it.
func withoutUndecodable(data []byte) ([]byte, bool) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := dec.Decode(&c)
	if err == nil {
		return nil, false
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return nil, false
	}
	var te *yaml.TypeError
	if errors.As(err, &te) {
		for _, e := range te.Errors {
			m := unknownField.FindStringSubmatch(e)
			if m == nil {
				return nil, false
			}
			line, _ := strconv.Atoi(m[1])
			if !removeKey(doc.Content[0], line, m[2]) {
				return nil, false
			}
		}
		out, err := yaml.Marshal(&doc)
		return out, err == nil
	}
	if strings.HasPrefix(err.Error(), "yaml: ") {
		return nil, false // the parser's own: syntax, aliases
	}
	return blankWord(data, &doc, err)
}

// removeKey removes the mapping key named name on line, and its value,
// from the tree under n, and reports whether it found it.
func removeKey(n *yaml.Node, line int, name string) bool {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k := n.Content[i]; k.Line == line && k.Value == name {
				n.Content = append(n.Content[:i], n.Content[i+2:]...)
				return true
			}
		}
	}
	for _, c := range n.Content {
		if removeKey(c, line, name) {
			return true
		}
	}
	return false
}

// blankWord replaces, in data, the one scalar value the decoding error err
// quotes with "" (as placeByValue places it), and reports whether there was
// exactly one and it stands on one line as written.
func blankWord(data []byte, doc *yaml.Node, err error) ([]byte, bool) {
	_, q, ok := strings.Cut(err.Error(), `"`)
	word, _, ok2 := strings.Cut(q, `"`)
	if !ok || !ok2 || word == "" {
		return nil, false
	}
	var at []*yaml.Node
	findValues(doc.Content[0], word, &at)
	if len(at) != 1 {
		return nil, false
	}
	n := at[0]
	lines := strings.Split(string(data), "\n")
	if n.Line < 1 || n.Line > len(lines) {
		return nil, false
	}
	l := lines[n.Line-1]
	start := 0 // byte offset of the value's column (a count of runes, from 1)
	for range n.Column - 1 {
		_, size := utf8.DecodeRuneInString(l[start:])
		if size == 0 {
			return nil, false
		}
		start += size
	}
	rest := l[start:]
	for _, written := range []string{word, strconv.Quote(word), "'" + word + "'"} {
		if strings.HasPrefix(rest, written) {
			lines[n.Line-1] = l[:start] + `""` + rest[len(written):]
			return []byte(strings.Join(lines, "\n")), true
		}
	}
	return nil, false
}

// findValues appends to at every scalar value (not a key) under n that is
// word.
func findValues(n *yaml.Node, word string, at *[]*yaml.Node) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			findValues(n.Content[i], word, at)
		}
	case yaml.SequenceNode, yaml.DocumentNode:
		for _, c := range n.Content {
			findValues(c, word, at)
		}
	case yaml.ScalarNode:
		if n.Value == word {
			*at = append(*at, n)
		}
	}
}
