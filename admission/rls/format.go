package rls

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// fileConfig is one envoyproxy/ratelimit config file, as its documented
// schema describes it: one domain and its descriptor tree.
type fileConfig struct {
	Domain      string             `yaml:"domain"`
	Descriptors []descriptorConfig `yaml:"descriptors"`
}

// descriptorConfig is one node of the descriptor tree.
type descriptorConfig struct {
	// Key is required; Value is optional (empty matches any value, a
	// trailing "*" any value with that prefix).
	Key   string `yaml:"key"`
	Value string `yaml:"value"`
	// RateLimit is the node's limit; nil means none (only children
	// limit).
	RateLimit *rateLimitConfig `yaml:"rate_limit"`
	// ShadowMode decides as usual and takes the tokens but always answers
	// OK, counting would-be rejections as outcome="shadow_reject".
	ShadowMode bool `yaml:"shadow_mode"`
	// DetailedMetric is accepted for compatibility. envoyproxy/ratelimit
	// then names its stats by the request's values; fairgate never puts a
	// request's values in a metric label, so it changes nothing here.
	DetailedMetric bool               `yaml:"detailed_metric"`
	Descriptors    []descriptorConfig `yaml:"descriptors"`
}

// rateLimitConfig is a node's rate_limit block.
type rateLimitConfig struct {
	Name            string          `yaml:"name"`
	Replaces        []replaceConfig `yaml:"replaces"`
	Unit            Unit            `yaml:"unit"`
	RequestsPerUnit uint32          `yaml:"requests_per_unit"`
	Unlimited       bool            `yaml:"unlimited"`
}

type replaceConfig struct {
	Name string `yaml:"name"`
}

// Unit is a rate limit's time unit. The zero value is no unit.
type Unit uint8

// The units envoyproxy/ratelimit accepts.
const (
	UnitNone Unit = iota
	UnitSecond
	UnitMinute
	UnitHour
	UnitDay
	UnitWeek
	UnitMonth
	UnitYear
)

var unitNames = [...]string{"", "second", "minute", "hour", "day", "week", "month", "year"}

// unitLengths are the units' lengths, as envoyproxy/ratelimit counts them
// (a month is 30 days, a year 365).
var unitLengths = [...]time.Duration{0, time.Second, time.Minute, time.Hour, 24 * time.Hour,
	7 * 24 * time.Hour, 30 * 24 * time.Hour, 365 * 24 * time.Hour}

// String returns the unit's name in lower case.
func (u Unit) String() string {
	if int(u) < len(unitNames) {
		return unitNames[u]
	}
	return "Unit(" + strconv.Itoa(int(u)) + ")"
}

// Duration returns the unit's length; zero for UnitNone.
func (u Unit) Duration() time.Duration {
	if int(u) < len(unitLengths) {
		return unitLengths[u]
	}
	return 0
}

// UnmarshalText accepts a unit's name in any case (envoyproxy/ratelimit
// upper-cases it) and rejects anything else at load time.
func (u *Unit) UnmarshalText(b []byte) error {
	s := strings.ToLower(string(b))
	for i, n := range unitNames {
		if i > 0 && n == s {
			*u = Unit(i)
			return nil
		}
	}
	return &unitError{s: string(b)}
}

// unitError is UnmarshalText's error; parseFile adds the field path.
type unitError struct{ s string }

func (e *unitError) Error() string {
	return fmt.Sprintf("unknown unit %q (want second, minute, hour, day, week, month or year)", e.s)
}

// parseFile decodes one file's bytes. Unknown fields are errors, as in
// envoyproxy/ratelimit, and so is a second document.
func parseFile(data []byte) (fileConfig, error) {
	var f fileConfig
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return f, errors.New("empty file")
		}
		return f, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return f, errors.New("more than one YAML document")
	}
	if err := checkFields(&root, ""); err != nil {
		return f, err
	}
	if err := root.Decode(&f); err != nil {
		return f, cleanDecodeError(err)
	}
	return f, nil
}

// fieldsOf lists the keys each mapping of the schema may hold, by the
// mapping's role.
var fieldsOf = map[string][]string{
	"file":       {"domain", "descriptors"},
	"descriptor": {"key", "value", "rate_limit", "shadow_mode", "detailed_metric", "descriptors"},
	"rate_limit": {"name", "replaces", "unit", "requests_per_unit", "unlimited"},
	"replaces":   {"name"},
}

// checkFields walks the document before decoding so that an unknown field
// or a bad unit is reported with its path (descriptors[2].rate_limit.unit)
// rather than a line number alone.
func checkFields(n *yaml.Node, path string) error {
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return errors.New("empty file")
		}
		n = n.Content[0]
	}
	return checkMapping(n, path, "file")
}

func checkMapping(n *yaml.Node, path, role string) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("%s: line %d: want a mapping", orTop(path), n.Line)
	}
	var errs []error
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		field := join(path, k.Value)
		known := false
		for _, f := range fieldsOf[role] {
			known = known || f == k.Value
		}
		if !known {
			errs = append(errs, fmt.Errorf("%s: line %d: unknown field %q", field, k.Line, k.Value))
			continue
		}
		switch k.Value {
		case "descriptors", "replaces":
			if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
				continue
			}
			if v.Kind != yaml.SequenceNode {
				errs = append(errs, fmt.Errorf("%s: line %d: want a list", field, v.Line))
				continue
			}
			sub := "descriptor"
			if k.Value == "replaces" {
				sub = "replaces"
			}
			for j, item := range v.Content {
				if err := checkMapping(item, field+"["+strconv.Itoa(j)+"]", sub); err != nil {
					errs = append(errs, err)
				}
			}
		case "rate_limit":
			if err := checkMapping(v, field, "rate_limit"); err != nil {
				errs = append(errs, err)
			}
		case "unit":
			var u Unit
			if err := u.UnmarshalText([]byte(v.Value)); err != nil || v.Kind != yaml.ScalarNode {
				errs = append(errs, fmt.Errorf("%s: unknown unit %q", field, v.Value))
			}
		case "requests_per_unit":
			if _, err := strconv.ParseUint(v.Value, 10, 32); err != nil || v.Kind != yaml.ScalarNode {
				errs = append(errs, fmt.Errorf("%s: %q is not a whole number from 0 to 4294967295", field, v.Value))
			}
		}
	}
	return errors.Join(errs...)
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

// cleanDecodeError shortens yaml.v3's type errors ("cannot unmarshal !!str
// `x` into bool") to one line each.
func cleanDecodeError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	return errors.New(strings.Join(te.Errors, "\n"))
}
