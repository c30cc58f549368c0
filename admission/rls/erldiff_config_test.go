package rls_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"gopkg.in/yaml.v3"
)

// This file is the differential test's reading of envoyproxy/ratelimit
// (ERL) config files: where they come from (ERL's own integration-test and
// example folders, and the ```yaml blocks of its README, read at test time
// from ERL_SRC so that nothing of ERL is copied here), and the test's own
// model of them — the tree, and matching as ERL matches — from which the
// call sequences are derived and fairgate's answers are predicted.

// erlConfig is one config file the test runs both services on.
type erlConfig struct {
	name string // for the table: the file under ERL_SRC, or README's heading
	data []byte
	file *erlFile // nil when it is not a rate limit config the test can read
}

// erlConfigs collects ERL's configs from src: every *.yaml under
// test/integration/runtime and examples/ratelimit/config, and every
// ```yaml block of README.md that is a rate limit config (a mapping with a
// domain). Other blocks (Prometheus mappings, Envoy snippets, the schema
// outline) are returned in skipped, with the reason.
func erlConfigs(src string) (cfgs []erlConfig, skipped []string, err error) {
	for _, dir := range []string{"test/integration/runtime", "examples/ratelimit/config"} {
		root := filepath.Join(src, dir)
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(src, p)
			cfgs = append(cfgs, erlConfig{name: rel, data: b})
			return nil
		})
		if err != nil {
			return nil, nil, fmt.Errorf("ERL_SRC: %w", err)
		}
	}
	readme, err := os.ReadFile(filepath.Join(src, "README.md"))
	if err != nil {
		return nil, nil, fmt.Errorf("ERL_SRC: %w", err)
	}
	for _, b := range yamlBlocks(readme) {
		cfgs = append(cfgs, erlConfig{name: b.name, data: b.data})
	}
	var out []erlConfig
	for _, c := range cfgs {
		f, why := parseERLFile(c.data)
		if f == nil {
			skipped = append(skipped, c.name+": "+why)
			continue
		}
		c.file = f
		out = append(out, c)
	}
	return out, skipped, nil
}

type mdBlock struct {
	name string
	data []byte
}

// yamlBlocks returns README's ```yaml blocks, each named by the nearest
// heading above it ("README.md Example 7", a second block under one
// heading "README.md Example 9 #2").
func yamlBlocks(md []byte) []mdBlock {
	var out []mdBlock
	heading, n := "", 0
	var cur *bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(md))
	for sc.Scan() {
		line := sc.Text()
		trim := strings.TrimSpace(line)
		switch {
		case cur != nil && trim == "```":
			name := "README.md " + heading
			if n++; n > 1 {
				name += fmt.Sprintf(" #%d", n)
			}
			out = append(out, mdBlock{name: name, data: cur.Bytes()})
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		case trim == "```yaml":
			cur = new(bytes.Buffer)
		case strings.HasPrefix(line, "#"):
			heading, n = strings.TrimSpace(strings.TrimLeft(line, "#")), 0
		}
	}
	return out
}

// erlFile is the test's model of one config: what ERL reads of it.
type erlFile struct {
	Domain      string     `yaml:"domain"`
	Descriptors []*erlNode `yaml:"descriptors"`
}

// erlNode is one descriptor of the tree. Fields ERL reads that change no
// answer (detailed_metric, value_to_metric, metadata) are not decoded.
type erlNode struct {
	Key            string        `yaml:"key"`
	Value          string        `yaml:"value"`
	RateLimit      *erlRateLimit `yaml:"rate_limit"`
	ShadowMode     bool          `yaml:"shadow_mode"`
	ShareThreshold bool          `yaml:"share_threshold"`
	QuotaMode      bool          `yaml:"quota_mode"`
	Descriptors    []*erlNode    `yaml:"descriptors"`
}

type erlRateLimit struct {
	Name            string `yaml:"name"`
	Unit            string `yaml:"unit"`
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unlimited       bool   `yaml:"unlimited"`
	Replaces        []struct {
		Name string `yaml:"name"`
	} `yaml:"replaces"`
}

// parseERLFile decodes a config, or returns nil and why it is not one.
func parseERLFile(data []byte) (*erlFile, string) {
	var probe map[string]any
	if err := yaml.Unmarshal(data, &probe); err != nil {
		return nil, "not YAML the test reads: " + firstLine(err.Error())
	}
	if _, ok := probe["domain"].(string); !ok {
		return nil, "not a rate limit config (no domain)"
	}
	var f erlFile
	if err := yaml.Unmarshal(data, &f); err != nil {
		return nil, "not a config the test reads: " + firstLine(err.Error())
	}
	return &f, ""
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// erlUnits are ERL's unit names, its response enum and the length of one.
var erlUnits = map[string]struct {
	unit rlsv3.RateLimitResponse_RateLimit_Unit
	len  time.Duration
}{
	"SECOND": {rlsv3.RateLimitResponse_RateLimit_SECOND, time.Second},
	"MINUTE": {rlsv3.RateLimitResponse_RateLimit_MINUTE, time.Minute},
	"HOUR":   {rlsv3.RateLimitResponse_RateLimit_HOUR, time.Hour},
	"DAY":    {rlsv3.RateLimitResponse_RateLimit_DAY, 24 * time.Hour},
	"WEEK":   {rlsv3.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour},
	"MONTH":  {rlsv3.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour},
	"YEAR":   {rlsv3.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour},
}

// unitLength is the length of one response unit; zero for UNKNOWN.
func unitLength(u rlsv3.RateLimitResponse_RateLimit_Unit) time.Duration {
	for _, e := range erlUnits {
		if e.unit == u {
			return e.len
		}
	}
	return 0
}

// limit is a rate limit as the model applies it: ERL's current_limit and
// what the bucket behind it is.
type limit struct {
	rpu       uint32
	unit      rlsv3.RateLimitResponse_RateLimit_Unit
	name      string  // ERL's current_limit.name: rate_limit.name, "" for an override
	window    float64 // seconds of one unit (times an override's multiplier)
	unlimited bool
	replaces  []string
	shadow    bool
	quota     bool // quota_mode: over, it refuses the request only with every quota descriptor of it over
	// multiplied: an override's window is unit × unit_multiplier.
	multiplied bool
}

// match is where one request descriptor lands in the model's tree.
type match struct {
	node   *erlNode // the node the last entry reached; nil when it left the tree
	limit  *limit   // nil: not limited
	bucket string   // the counter's identity: domain and entries, a shared wildcard's pattern in place of the value
}

// erlMatch walks f's tree with entries as ERL does: at each level the
// entry's exact key and value, else the first wildcard in config order
// whose key_value pattern matches, else the key alone; the limit is the one
// of the node the last entry reached, and a descriptor that goes deeper
// than the tree is not limited. Values matched by a share_threshold
// wildcard count in one counter, named by the pattern.
func (f *erlFile) erlMatch(entries [][2]string) match {
	level := f.Descriptors
	var b strings.Builder
	b.WriteString(f.Domain)
	var m match
	for i, e := range entries {
		n, viaWild := findNode(level, e[0], e[1])
		value := e[1]
		if n != nil && viaWild && n.ShareThreshold {
			value = n.Value
		}
		fmt.Fprintf(&b, "|%s=%s", e[0], value)
		if n != nil && i == len(entries)-1 {
			m.node = n
			if n.RateLimit != nil {
				m.limit = n.limitOf()
			}
		}
		if n == nil || len(n.Descriptors) == 0 {
			break
		}
		level = n.Descriptors
	}
	m.bucket = b.String()
	return m
}

// findNode is one level's lookup; viaWild says a wildcard matched.
func findNode(level []*erlNode, key, value string) (n *erlNode, viaWild bool) {
	for _, c := range level {
		if c.Key == key && c.Value == value && value != "" {
			return c, false
		}
	}
	for _, c := range level {
		if strings.Contains(c.Value, "*") && globMatch(c.Key+"_"+c.Value, key+"_"+value) {
			return c, true
		}
	}
	for _, c := range level {
		if c.Key == key && c.Value == "" {
			return c, false
		}
	}
	return nil, false
}

func (n *erlNode) limitOf() *limit {
	rl := n.RateLimit
	l := &limit{rpu: rl.RequestsPerUnit, name: rl.Name, unlimited: rl.Unlimited, shadow: n.ShadowMode, quota: n.QuotaMode}
	if u, ok := erlUnits[strings.ToUpper(rl.Unit)]; ok {
		l.unit, l.window = u.unit, u.len.Seconds()
	}
	for _, r := range rl.Replaces {
		l.replaces = append(l.replaces, r.Name)
	}
	return l
}

// globMatch reports whether s matches pattern, each "*" any run of
// characters (none included).
func globMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	last := parts[len(parts)-1]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return strings.HasSuffix(s, last)
}

// nodes returns every node of the tree with its path from the top.
func (f *erlFile) nodes() [][]*erlNode {
	var out [][]*erlNode
	var walk func(path []*erlNode, level []*erlNode)
	walk = func(path []*erlNode, level []*erlNode) {
		for _, n := range level {
			p := append(slices.Clone(path), n)
			out = append(out, p)
			walk(p, n.Descriptors)
		}
	}
	walk(nil, f.Descriptors)
	return out
}
