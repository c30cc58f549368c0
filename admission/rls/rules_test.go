package rls

import (
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

func TestLoadRulesNamesFileAndField(t *testing.T) {
	_, err := LoadRules([]string{"testdata/bad/typo-unit.yaml"})
	want := `testdata/bad/typo-unit.yaml: descriptors[2].rate_limit.unit: unknown unit "minut"`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}

func TestParseRulesErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"no domain", "descriptors:\n  - key: a\n", "f.yaml: domain: required"},
		{"empty", "", "f.yaml: empty file"},
		{"unknown field", "domain: d\ndescriptors:\n  - key: a\n    rate_limits: {}\n", `f.yaml: descriptors[0].rate_limits: line 4: unknown field "rate_limits"`},
		{"unknown nested field", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: second, requests_per_unit: 1, burst: 3}\n",
			`f.yaml: descriptors[0].descriptors[0].rate_limit.burst: line 6: unknown field "burst"`},
		{"no key", "domain: d\ndescriptors:\n  - value: a\n", "f.yaml: descriptors[0].key: required"},
		{"no unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 1}\n", "f.yaml: descriptors[0].rate_limit.unit: required (second, minute, hour, day, week, month or year)"},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}\n", "f.yaml: descriptors[0].rate_limit.unit: an unlimited rate limit has no unit: delete unit, or unlimited: true"},
		{"negative rpu", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}\n", `f.yaml: descriptors[0].rate_limit.requests_per_unit: "-1" is not a whole number from 0 to 4294967295`},
		{"duplicate", "domain: d\ndescriptors:\n  - key: a\n    value: x\n  - key: a\n    value: x\n", `f.yaml: descriptors[1]: key "a" value "x": configured twice at this level`},
		{"replaces without name", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{}]}\n", "f.yaml: descriptors[0].rate_limit.replaces[0].name: required"},
		{"two documents", "domain: d\n---\ndomain: e\n", "f.yaml: line 3: a second YAML document: envoyproxy/ratelimit ignores all but a file's first document: put each domain in a file of its own, or delete what follows the ---"},
		{"not a mapping", "- a\n", "f.yaml: (top level): line 1: want a mapping"},
		{"bool typo", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: sometimes\n", "f.yaml: line 4: cannot unmarshal !!str `sometimes` into bool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRules(Source{Name: "f.yaml", Data: []byte(tc.yaml)})
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got  %v\nwant %s", err, tc.want)
			}
		})
	}
}

func TestParseRulesDuplicateDomainAcrossFiles(t *testing.T) {
	_, err := ParseRules(Source{"a.yaml", []byte("domain: d\n")}, Source{"b.yaml", []byte("domain: d\n")})
	want := `b.yaml: domain: "d" is already configured in a.yaml: give each file its own domain, or set rls.merge_domain_config: true to merge the files of one domain (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG=true)`
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}

func TestLoadRulesFolder(t *testing.T) {
	// A folder's *.yaml files are read; notes.txt is not.
	r := mustLoad(t, "testdata/shadow", "testdata/edge.yaml")
	if got, want := strings.Join(r.Domains(), ","), "edge,rollout"; got != want {
		t.Fatalf("domains %s, want %s", got, want)
	}
	if _, err := LoadRules([]string{"testdata/missing"}); err == nil {
		t.Fatal("a missing path loaded")
	}
}

func TestUnitsAndBuckets(t *testing.T) {
	for _, tc := range []struct {
		unit   string
		window time.Duration
	}{
		{"second", time.Second}, {"MINUTE", time.Minute}, {"Hour", time.Hour}, {"day", 24 * time.Hour},
		{"week", 7 * 24 * time.Hour}, {"month", 30 * 24 * time.Hour}, {"year", 365 * 24 * time.Hour},
	} {
		r := mustRules(t, Source{"u.yaml", []byte("domain: u\ndescriptors:\n  - key: k\n    rate_limit: {unit: " + tc.unit + ", requests_per_unit: 60}\n")})
		rl := r.domains["u"].byKey["k"].limit
		want := ratelimit.Limit{Rate: 60 / tc.window.Seconds(), Burst: 60}
		if rl.limit != want || rl.window != tc.window {
			t.Errorf("%s: limit %+v window %v, want %+v %v", tc.unit, rl.limit, rl.window, want, tc.window)
		}
	}
}

// FuzzParseRules: any bytes are an error or rules, never a panic; rules
// that load have only positive finite limits.
func FuzzParseRules(f *testing.F) {
	for _, s := range []string{"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"domain: d\ndescriptors:\n  - key: a\n    value: b*\n    descriptors: [{key: c, rate_limit: {unlimited: true}}]\n",
		"domain: d\ndescriptors: ~\n", "{}", "domain: [1]\n",
		"domain: d\ndescriptors:\n  - key: a\n    value: x*y*\n    share_threshold: true\n    rate_limit: &r {unit: minute, requests_per_unit: 1}\n    metadata: {m: &m [1, *m]}\n  - {key: b*, rate_limit: {<<: *r, name: n}}\n",
		"domain: d\ndescriptors: &a\n  - key: k\n    descriptors: *a\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseRules(Source{"f.yaml", data})
		if err != nil {
			return
		}
		var walk func(l *level)
		check := func(n *node) {
			if n.limit != nil && n.limit.requestsPerUnit > 0 && !(n.limit.limit.Rate > 0 && n.limit.limit.Burst > 0) {
				t.Fatalf("%s: limit %+v", n.path, n.limit.limit)
			}
			walk(&n.children)
		}
		walk = func(l *level) {
			for _, n := range l.exact {
				check(n)
			}
			for _, n := range l.byKey {
				check(n)
			}
			for _, n := range l.wild {
				check(n)
			}
		}
		for _, l := range r.domains {
			walk(l)
		}
	})
}
