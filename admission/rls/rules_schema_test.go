package rls

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// TestShareThreshold: on testdata/share.yaml (each row checked against
// envoyproxy/ratelimit's own cache keys), the bucket a descriptor takes is
// named by its entries with each entry that reached a share_threshold
// wildcard named by the wildcard instead.
func TestShareThreshold(t *testing.T) {
	r := mustLoad(t, "testdata/share.yaml")
	tag := r.domains["share"].tag
	for _, tc := range []struct{ spec, bucket string }{
		{"files=files/a.pdf", "files=files/*"},
		{"files=files/b.csv", "files=files/*"},
		{"files=files/*", "files=files/*"},                                     // the wildcard's text, sent as it is: the same bucket
		{"files_no_share=files_no_share/a", "files_no_share=files_no_share/a"}, // the control: one bucket per value
		{"route=api/v1,method=GET", "route=api/*,method=GET"},                  // shared above the limit
		{"route=api/v2,method=POST", "route=api/*,method=POST"},
		{"path=path/1,file=file/2,type=t", "path=path/*,file=file/2,type=t"}, // file/* has share_threshold: false
		{"tenant=tAprod", "tenant=t*prod"},
		{"file=test1", "file=test1"}, // the exact value's own rule, not the shared wildcard
		{"file=test2", "file=test*"},
	} {
		n := reach(r, "share", tc.spec)
		if n == nil || n.limit == nil {
			t.Errorf("%s: not limited", tc.spec)
			continue
		}
		if got, want := n.limit.bucketKey(tag, entries(tc.spec)), bucketKey(tag, entries(tc.bucket)); got != want {
			t.Errorf("%s: bucket %+v, want %+v (%s)", tc.spec, got, want, tc.bucket)
		}
	}
	// A request-level override's rule shares nothing.
	o := newRule("override", 1, UnitSecond, time.Second)
	if got, want := o.bucketKey(tag, entries("files=files/a")), bucketKey(tag, entries("files=files/a")); got != want {
		t.Errorf("override: bucket %+v, want %+v", got, want)
	}
}

// TestQuotaModeAndMetadata: testdata/quota.yaml's quota_mode and metadata
// reach the rule, anchors, aliases and merge keys are followed, and the
// fields that only name envoyproxy/ratelimit's stats are accepted.
func TestQuotaModeAndMetadata(t *testing.T) {
	r := mustLoad(t, "testdata/quota.yaml")
	md := func(m map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(m)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	for _, tc := range []struct {
		spec      string
		unit      Unit
		rpu       uint32
		unlimited bool
		quota     bool
		metadata  *structpb.Struct
	}{
		{"service=service_1", UnitMinute, 1, false, true,
			md(map[string]any{"service_with_quota": map[string]any{"name": "service_1", "tier": 2, "tags": []any{"a", "b"}}})},
		{"service=service_2", UnitMinute, 2, false, true, md(map[string]any{"service_with_quota": map[string]any{"name": "service_2"}})},
		{"user=u", UnitMinute, 1, false, false, nil},
		{"internal=x", UnitNone, 0, true, false, nil},
	} {
		n := reach(r, "quota", tc.spec)
		if n == nil || n.limit == nil {
			t.Errorf("%s: not limited", tc.spec)
			continue
		}
		l := n.limit
		if l.unit != tc.unit || l.requestsPerUnit != tc.rpu || l.unlimited != tc.unlimited || l.quotaMode != tc.quota {
			t.Errorf("%s: unit %v rpu %d unlimited %v quota %v, want %v %d %v %v", tc.spec, l.unit, l.requestsPerUnit, l.unlimited, l.quotaMode,
				tc.unit, tc.rpu, tc.unlimited, tc.quota)
		}
		if l.unlimited && l.limit != (ratelimit.Limit{}) {
			t.Errorf("%s: unlimited, yet a bucket %+v", tc.spec, l.limit)
		}
		if !proto.Equal(l.metadata, tc.metadata) {
			t.Errorf("%s: metadata %v, want %v", tc.spec, l.metadata, tc.metadata)
		}
	}
	if n := reach(r, "quota", "open=y"); n == nil || n.limit != nil {
		t.Errorf("open=y: %+v, want a node without rate_limit", n)
	}
}

func TestMetadataValues(t *testing.T) {
	r := mustRules(t, Source{"m.yaml", []byte(`domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
    metadata: {i: 0x10, f: 1.5, b: yes, o: off, q: "yes", t: !!str no, n: ~, s: "x", d: 2001-12-14, bin: !!binary aGVsbG8=, 7: seven, 1.50: f, l: [1, {a: b}], <<: {i: 1, m: 2}}
`)})
	got := r.domains["d"].byKey["k"].limit.metadata
	// As envoyproxy/ratelimit's reader reads it, down to the merge key
	// setting i over the i before it.
	want, err := structpb.NewStruct(map[string]any{"i": 1, "m": 2, "f": 1.5, "b": true, "o": false, "q": "yes", "t": "no", "n": nil, "s": "x",
		"d": "2001-12-14", "bin": "hello", "7": "seven", "1.50": "f", "l": []any{1, map[string]any{"a": "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("metadata %v, want %v", got, want)
	}
}

// TestMergeDomains: rls.merge_domain_config merges one domain's files, in
// the order they are read, and still refuses a descriptor written twice.
func TestMergeDomains(t *testing.T) {
	r, err := Config{Configs: []string{"testdata/merge"}, MergeDomainConfig: true}.LoadRules()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ spec, want string }{
		{"user=botnet-1", "bot"}, // 10-users.yaml's bot* is read before 20-more.yaml's botnet*
		{"key1=value1", "key1=value1"},
		{"key2=value2", "key2=value2"},
	} {
		if got := limitName(r, "merged", tc.spec); got != tc.want {
			t.Errorf("%s: limited by %q, want %q", tc.spec, got, tc.want)
		}
	}

	_, err = LoadRules([]string{"testdata/merge"})
	want := `testdata/merge/20-more.yaml: domain: "merged" is already configured in testdata/merge/10-users.yaml: give each file its own domain, or set rls.merge_domain_config: true to merge the files of one domain (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG=true)`
	if err == nil || err.Error() != want {
		t.Errorf("without merging: %v, want %s", err, want)
	}

	a := Source{"a.yaml", []byte("domain: d\ndescriptors:\n  - {key: k, value: v, rate_limit: {unit: second, requests_per_unit: 1}}\n")}
	b := Source{"b.yaml", []byte("domain: d\ndescriptors:\n  - {key: j}\n  - {key: k, value: v}\n")}
	_, err = Loader{MergeDomains: true}.Parse(a, b)
	want = `b.yaml: descriptors[1]: key "k" value "v": configured twice at this level (first in a.yaml, descriptors[0])`
	if err == nil || err.Error() != want {
		t.Errorf("a descriptor in two files: %v, want %s", err, want)
	}
}

// TestERLLeniency: what envoyproxy/ratelimit accepts, this accepts too
// (want ""), or refuses with the fix in the message. Each row's input was
// run through envoyproxy/ratelimit's loader.
func TestERLLeniency(t *testing.T) {
	const top = "domain: d\ndescriptors:\n  - key: k\n"
	for _, tc := range []struct{ name, yaml, want string }{
		// Accepted by both.
		{"unlimited beside requests_per_unit", top + "    rate_limit: {unlimited: true, requests_per_unit: 5}\n", ""},
		{"unlimited with a null unit", top + "    rate_limit: {unlimited: true, unit: ~}\n", ""},
		{"null rate_limit and descriptors", top + "    rate_limit: ~\n    descriptors: ~\n", ""},
		{"null requests_per_unit", top + "    rate_limit: {unit: second, requests_per_unit: ~}\n", ""},
		{"YAML 1.1 boolean", top + "    shadow_mode: yes\n", ""},
		{"hex and underscores", top + "    rate_limit: {unit: second, requests_per_unit: 0x1_0}\n", ""},
		{"anchor and alias", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &r {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: *r\n", ""},
		{"merge key", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &r {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {<<: *r, requests_per_unit: 2}\n", ""},
		{"a list of merge keys", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &r {unit: second}\n  - key: b\n    rate_limit: &s {unit: minute, requests_per_unit: 2}\n  - key: c\n    rate_limit: {<<: [*r, *s]}\n", ""},
		{"an empty second document", top + "---\n# nothing\n", ""},
		{"a number as value", top + "    value: 123\n", ""},
		{"every new field", top + "    value: v*\n    share_threshold: true\n    value_to_metric: true\n    quota_mode: true\n    detailed_metric: true\n    metadata: {a: 1}\n", ""},

		// Refused by both.
		{"unlimited beside a unit", top + "    rate_limit: {unlimited: true, unit: day}\n",
			"f.yaml: descriptors[0].rate_limit.unit: an unlimited rate limit has no unit: delete unit, or unlimited: true"},
		{"replaces its own name", top + "    rate_limit: {name: a, unit: second, replaces: [{name: a}]}\n",
			`f.yaml: descriptors[0].rate_limit.replaces[0].name: "a" is this rate limit's own name, and a limit that replaces itself never applies: name the limit it replaces`},
		{"share_threshold without a wildcard", top + "    value: v\n    share_threshold: true\n",
			`f.yaml: descriptors[0].share_threshold: true needs a wildcard value (one with "*"), and value "v" has none: add the "*" or delete share_threshold`},
		{"a fraction", top + "    rate_limit: {unit: second, requests_per_unit: 10.0}\n",
			`f.yaml: descriptors[0].rate_limit.requests_per_unit: "10.0" is not a whole number from 0 to 4294967295`},
		{"a quoted number", top + "    rate_limit: {unit: second, requests_per_unit: \"10\"}\n",
			`f.yaml: descriptors[0].rate_limit.requests_per_unit: "10" is not a whole number from 0 to 4294967295`},
		{"metadata not a mapping", top + "    metadata: 5\n", "f.yaml: descriptors[0].metadata: line 4: want a mapping"},
		{"an alias cycle", "domain: d\ndescriptors: &a\n  - key: k\n    descriptors: *a\n", "f.yaml: yaml: anchor 'a' value contains itself"},

		// Accepted by envoyproxy/ratelimit, which ignores or drops part of
		// the file; refused here.
		{"a field given twice", top + "    rate_limit: {unit: second, requests_per_unit: 1}\n    rate_limit: {unit: minute, requests_per_unit: 5}\n",
			`f.yaml: descriptors[0].rate_limit: line 5: "rate_limit" given twice (first at line 4), and envoyproxy/ratelimit silently keeps the last: delete the one you do not mean`},
		{"unit beside key", top + "    unit: second\n    rate_limit: {unit: minute, requests_per_unit: 5}\n",
			`f.yaml: descriptors[0].unit: line 4: "unit" belongs in rate_limit, and envoyproxy/ratelimit ignores it here: move it there, or delete it to keep what envoyproxy/ratelimit does`},
		{"shadow_mode inside rate_limit", top + "    rate_limit: {unit: minute, requests_per_unit: 5, shadow_mode: true}\n",
			`f.yaml: descriptors[0].rate_limit.shadow_mode: line 4: "shadow_mode" belongs in a descriptor, and envoyproxy/ratelimit ignores it here: move it there, or delete it to keep what envoyproxy/ratelimit does`},
		{"key at the top", "domain: d\nkey: k\n",
			`f.yaml: key: line 2: "key" belongs in a descriptor, and envoyproxy/ratelimit ignores it here: move it there, or delete it to keep what envoyproxy/ratelimit does`},
		{"a field before a merge key that brings it", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &r {unit: second, requests_per_unit: 1}\n  - key: b\n    rate_limit: {requests_per_unit: 7, <<: *r}\n",
			`f.yaml: descriptors[1].rate_limit.requests_per_unit: line 6: "requests_per_unit" is written before the << of line 6, which brings it too, and envoyproxy/ratelimit then takes the merged value where YAML takes this one: move << above it`},
		{"a second document", top + "---\ndomain: e\n",
			"f.yaml: line 5: a second YAML document: envoyproxy/ratelimit ignores all but a file's first document: put each domain in a file of its own, or delete what follows the ---"},
		{"unlimited with an unknown unit", top + "    rate_limit: {unlimited: true, unit: forever}\n", `f.yaml: descriptors[0].rate_limit.unit: unknown unit "forever"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseRules(Source{Name: "f.yaml", Data: []byte(tc.yaml)})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want):
				t.Fatalf("got  %v\nwant %s", err, tc.want)
			}
		})
	}
}

// TestLoadedValues: what the lenient forms above load as.
func TestLoadedValues(t *testing.T) {
	r := mustRules(t, Source{"f.yaml", []byte(`domain: d
descriptors:
  - {key: hex, rate_limit: {unit: second, requests_per_unit: 0x1_0}}
  - {key: yes, shadow_mode: yes}
  - {key: a, rate_limit: &r {unit: minute, requests_per_unit: 1}}
  - {key: b, rate_limit: &s {unit: second, requests_per_unit: 2}}
  - {key: c, rate_limit: {<<: [*r, *s], name: merged}}
  - {key: e, rate_limit: {<<: *r, requests_per_unit: 7}}
  - {key: num, value: 123}
`)})
	lvl := r.domains["d"]
	if l := lvl.byKey["hex"].limit; l.requestsPerUnit != 16 {
		t.Errorf("0x1_0: %d, want 16", l.requestsPerUnit)
	}
	if !lvl.byKey["yes"].shadow {
		t.Error("shadow_mode: yes is not shadow mode")
	}
	// The earlier mapping of a merge list wins; a field after << over it.
	if l := lvl.byKey["c"].limit; l.unit != UnitMinute || l.requestsPerUnit != 1 || l.name != "merged" {
		t.Errorf("merged rate_limit: %v %d %q, want minute 1 merged", l.unit, l.requestsPerUnit, l.name)
	}
	if l := lvl.byKey["e"].limit; l.unit != UnitMinute || l.requestsPerUnit != 7 {
		t.Errorf("<< then requests_per_unit: %v %d, want minute 7", l.unit, l.requestsPerUnit)
	}
	if lvl.exact[entryKey{"num", "123"}] == nil {
		t.Error("value: 123 is not the value \"123\"")
	}
}

// TestTestdataLoads: the testdata files that are valid for
// envoyproxy/ratelimit too: they must load here, one folder at a time as
// envoyproxy/ratelimit reads its folder.
func TestTestdataLoads(t *testing.T) {
	for _, p := range []string{"testdata/wildcards.yaml", "testdata/share.yaml", "testdata/quota.yaml", "testdata/edge.yaml",
		"testdata/nested.yaml", "testdata/replaces.yaml", "testdata/shadow"} {
		if _, err := LoadRules([]string{p}); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, err := LoadRules([]string{"testdata/bad"}); err == nil || !strings.Contains(err.Error(), "minut") {
		t.Errorf("testdata/bad: %v", err)
	}
}
