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
	// Key is required; Value is optional (empty matches any value). A "*"
	// in Value stands for any run of characters (see Matching in the
	// package doc); one in Key makes key and value, joined by "_", one
	// pattern, as envoyproxy/ratelimit matches them.
	Key   string `yaml:"key"`
	Value string `yaml:"value"`
	// RateLimit is the node's limit; nil means none (only children
	// limit).
	RateLimit *rateLimitConfig `yaml:"rate_limit"`
	// ShadowMode decides as usual and takes the tokens but always answers
	// OK, counting would-be rejections as outcome="shadow_reject".
	ShadowMode bool `yaml:"shadow_mode"`
	// QuotaMode makes the node's rate limit a quota: over it, the
	// descriptor's status is OVER_LIMIT, but the request is refused only
	// when every quota descriptor of the request is over (rule.quotaMode).
	QuotaMode bool `yaml:"quota_mode"`
	// ShareThreshold, on a wildcard, counts every value the wildcard
	// matches in one bucket, named by the wildcard (rule.bucketKey),
	// rather than one bucket per value.
	ShareThreshold bool `yaml:"share_threshold"`
	// DetailedMetric and ValueToMetric are accepted for compatibility.
	// envoyproxy/ratelimit then names its stats by the request's values;
	// fairgate never puts a request's values in a metric label (labels
	// name the configured descriptor), so they change nothing here.
	DetailedMetric bool `yaml:"detailed_metric"`
	ValueToMetric  bool `yaml:"value_to_metric"`
	// Metadata is any mapping, kept with the node's rate limit
	// (rule.metadata) for the response's dynamic_metadata.
	Metadata    yaml.Node          `yaml:"metadata"`
	Descriptors []descriptorConfig `yaml:"descriptors"`
}

// rateLimitConfig is a node's rate_limit block.
type rateLimitConfig struct {
	Name            string          `yaml:"name"`
	Replaces        []replaceConfig `yaml:"replaces"`
	Unit            Unit            `yaml:"unit"`
	RequestsPerUnit uint32          `yaml:"requests_per_unit"`
	Unlimited       bool            `yaml:"unlimited"`
	// Window is fairgate's, not envoyproxy/ratelimit's (which refuses a
	// file that has it): fixed or bucket; unset follows rls.window.
	Window Window `yaml:"window"`
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
// upper-cases it), and "" as UnitNone (no unit written); it rejects
// anything else at load time.
func (u *Unit) UnmarshalText(b []byte) error {
	s := strings.ToLower(string(b))
	if s == "" {
		*u = UnitNone
		return nil
	}
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
// envoyproxy/ratelimit, and so is a second document with content.
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
	for {
		var extra yaml.Node
		err := dec.Decode(&extra)
		if errors.Is(err, io.EOF) {
			break
		}
		// A "---" with nothing after it is no document; one with content
		// is a domain envoyproxy/ratelimit would silently drop.
		const fix = "envoyproxy/ratelimit ignores all but a file's first document: put each domain in a file of its own, or delete what follows the ---"
		if err != nil {
			return f, fmt.Errorf("a second YAML document (%w): %s", err, fix)
		}
		if len(extra.Content) > 0 && extra.Content[0].ShortTag() != "!!null" {
			return f, fmt.Errorf("line %d: a second YAML document: %s", extra.Content[0].Line, fix)
		}
	}
	if err := checkFields(&root); err != nil {
		return f, err
	}
	if err := root.Decode(&f); err != nil {
		return f, cleanDecodeError(err)
	}
	return f, nil
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
