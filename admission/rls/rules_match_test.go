package rls

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// reach walks r's tree of domain with the entries of spec
// ("k=v,k2=v2"), as a request descriptor descends it, and returns the
// node the last entry reached, or nil.
func reach(r *Rules, domain, spec string) *node {
	lvl := r.domains[domain]
	if lvl == nil {
		return nil
	}
	var n *node
	for _, e := range entries(spec) {
		if n != nil {
			lvl = &n.children
		}
		if n = lvl.child(e.Key, e.Value); n == nil {
			return nil
		}
	}
	return n
}

// entries parses spec, "k=v,k2=v2", into request entries.
func entries(spec string) []*ratelimitEntry {
	var out []*ratelimitEntry
	for _, kv := range strings.Split(spec, ",") {
		k, v, _ := strings.Cut(kv, "=")
		out = append(out, &ratelimitEntry{Key: k, Value: v})
	}
	return out
}

// limitName is the name of the rate limit spec reaches, or "" when none.
func limitName(r *Rules, domain, spec string) string {
	if n := reach(r, domain, spec); n != nil && n.limit != nil {
		return n.limit.name
	}
	return ""
}

// TestMatchPrecedence: envoyproxy/ratelimit's order on
// testdata/wildcards.yaml (each row checked against envoyproxy/ratelimit's
// own matcher): an exact value, then the first wildcard as listed, then
// the key alone, and no way back up once an entry has reached a node.
func TestMatchPrecedence(t *testing.T) {
	r := mustLoad(t, "testdata/wildcards.yaml")
	for _, tc := range []struct{ spec, want string }{
		{"user=botnet-w4", "bot"},        // bot* is listed first: first, not longest
		{"user=botnet-x", "botnet-x"},    // an exact value before any wildcard
		{"user=botnet*", "botnet"},       // a wildcard's own text is an exact value
		{"user=bot", "bot"},              // "*" matches no character too
		{"user=bo", "any-user"},          // no wildcard matches: the key alone
		{"user=", "any-user"},            // an empty value
		{"path=/api/1/action", "action"}, // a middle wildcard
		{"path=/api//action", "action"},  // ... which matches nothing in the middle
		{"path=/api/action", ""},         // ... but needs both "/"
		{"path=/api/1/action/x", ""},     // ... and the suffix at the end
		{"route=/api/v1/resource/9/action", "resource-action"},
		{"route=/api/v1/resource/9/other", ""},
		{"route=/api/resource/action", ""},
		{"file=a.pdf", "pdf"}, // a leading wildcard
		{"file=.pdf", "pdf"},
		{"file=a.pdfx", ""},
		{"any=", "any-value"}, // "*" alone matches an empty value
		{"any=zz", "any-value"},
		{"tier=gold,user=alice", "gold-alice"},
		{"tier=gold,user=bob", ""}, // tier=gold was reached: g* and tier are not tried
		{"tier=gx,user=bob", "g-user"},
		{"tier=silver,user=bob", "tier-user"},
		{"tier=gold", ""}, // a node without rate_limit
		{"user=botnet-w4,extra=1", ""},
		{"scope=headers,x-foo=1", "x-header"}, // a "*" in a key
		{"scope=headers,x-=", "x-header"},
		{"scope=headers,y=1", ""},
		{"nouser=bot", ""},
	} {
		if got := limitName(r, "wildcards", tc.spec); got != tc.want {
			t.Errorf("%s: limited by %q, want %q", tc.spec, got, tc.want)
		}
	}
}

// TestMatchKeyAndValueApart: a value wildcard compares the key whole.
// envoyproxy/ratelimit matches the joined text "key_value", so there
// entry (k_q, z) reaches descriptor (k, *z) and (a_b, c) reaches (a, b_c);
// here neither does.
func TestMatchKeyAndValueApart(t *testing.T) {
	r := mustRules(t, Source{"a.yaml", []byte(`domain: d
descriptors:
  - {key: k, value: "*z", rate_limit: {name: kz, unit: second, requests_per_unit: 1}}
  - {key: a, value: b_c, rate_limit: {name: abc, unit: second, requests_per_unit: 1}}
  - {key: a_b, value: c, rate_limit: {name: a_b-c, unit: second, requests_per_unit: 1}}
`)})
	for _, tc := range []struct{ spec, want string }{
		{"k=z", "kz"}, {"k=qz", "kz"}, {"k_q=z", ""},
		{"a=b_c", "abc"}, {"a_b=c", "a_b-c"},
	} {
		if got := limitName(r, "d", tc.spec); got != tc.want {
			t.Errorf("%s: limited by %q, want %q", tc.spec, got, tc.want)
		}
	}
}

func TestPatternMatch(t *testing.T) {
	for _, tc := range []struct {
		pat, s string
		want   bool
	}{
		{"a*", "a", true}, {"a*", "abc", true}, {"a*", "b", false},
		{"*", "", true}, {"*c", "abc", true}, {"*c", "cb", false},
		{"a*c", "ac", true}, {"a*c", "abbc", true}, {"a*c", "acb", false},
		{"a*a", "a", false}, {"a*a", "aa", true}, // prefix and suffix may not overlap
		{"a*b*c", "abc", true}, {"a*b*c", "ac", false}, {"a*b*c", "abbcbc", true},
		{"ab*bc*cd", "abcd", false}, {"ab*bc*cd", "abbccd", true},
		{"**", "", true}, {"a**b", "ab", true},
	} {
		if got := compilePattern(tc.pat, false).match(tc.s); got != tc.want {
			t.Errorf("%q matches %q: %v, want %v", tc.pat, tc.s, got, tc.want)
		}
	}
}

// FuzzPattern: pattern.match agrees with a regular expression in which
// each "*" is ".*" and everything else is literal.
func FuzzPattern(f *testing.F) {
	for _, s := range [][2]string{{"a*", "abc"}, {"/api/*/action", "/api/1/action"}, {"a*b*c", "abbc"}, {"*x*", "x"}, {"a*a", "a"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pat, s string) {
		if !utf8.ValidString(pat) || !utf8.ValidString(s) {
			t.Skip() // regexp reads text: an invalid byte would be U+FFFD to it
		}
		if !strings.Contains(pat, "*") {
			pat += "*"
		}
		parts := strings.Split(pat, "*")
		for i, p := range parts {
			parts[i] = regexp.QuoteMeta(p)
		}
		re := regexp.MustCompile(`(?s)\A` + strings.Join(parts, ".*") + `\z`)
		if got, want := compilePattern(pat, false).match(s), re.MatchString(s); got != want {
			t.Fatalf("%q matches %q: %v, regexp says %v", pat, s, got, want)
		}
	})
}

func BenchmarkChildWildcard(b *testing.B) {
	r := mustLoad(b, "testdata/wildcards.yaml")
	lvl := r.domains["wildcards"]
	b.ReportAllocs()
	for b.Loop() {
		if lvl.child("route", "/api/v1/resource/9/action") == nil {
			b.Fatal("no match")
		}
	}
}
