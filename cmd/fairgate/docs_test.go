package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/admission/gateway"
	"github.com/fairgate/fairgate/tenant"
)

// markdownLink is a link in a Markdown file: its target, then the anchor.
var markdownLink = regexp.MustCompile(`\]\(([^)#\s]*)(#[^)\s]*)?\)`)

// anchorOf is the anchor GitHub gives a heading.
func anchorOf(heading string) string {
	h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(heading, "#")))
	h = regexp.MustCompile(`[^\w\- ]`).ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}

// anchors are the anchors of the headings in the Markdown file at path.
func anchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	inCode := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "```") {
			inCode = !inCode
		}
		if !inCode && strings.HasPrefix(l, "#") {
			m[anchorOf(l)] = true
		}
	}
	return m
}

// TestDocsLinks: every page of the manual is linked from the README, and
// every relative link of the README and the manual reaches a file, and a
// heading there when it names one.
func TestDocsLinks(t *testing.T) {
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("docs/*.md: %v, %d pages", err, len(pages))
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		if !strings.Contains(string(readme), "](docs/"+filepath.Base(p)+")") {
			t.Errorf("README does not link %s", filepath.Base(p))
		}
	}
	for _, file := range append([]string{"../../README.md"}, pages...) {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range markdownLink.FindAllStringSubmatch(string(b), -1) {
			target, anchor := m[1], strings.TrimPrefix(m[2], "#")
			if strings.Contains(target, ":") {
				continue // a URL
			}
			dest := file
			if target != "" {
				dest = filepath.Join(filepath.Dir(file), target)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s links %s, which does not exist", file, target)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(dest, ".md") && !anchors(t, dest)[anchor] {
				t.Errorf("%s links %s#%s, which has no such heading", file, target, anchor)
			}
		}
	}
}

// yamlNames adds to out the names of the config file's fields in t, as
// their yaml tags say, and of the fields of the structs within (inline
// ones, and the elements of maps, slices and pointers).
func yamlNames(t reflect.Type, out map[string]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t.PkgPath() == "time" {
		return
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if strings.Contains(opts, "inline") {
			yamlNames(f.Type, out)
			continue
		}
		if name == "" {
			continue
		}
		out[name] = true
		yamlNames(f.Type, out)
	}
}

// TestConfigReferenceComplete: every field the config file may set is named
// in the manual (docs/configuration.md, and for the redis, tracing and rls
// sections the pages it links), so it cannot fall behind the config
// structs.
func TestConfigReferenceComplete(t *testing.T) {
	var doc string
	for _, page := range []string{"configuration.md", "redis.md", "observability.md", "envoy.md"} {
		b, err := os.ReadFile("../../docs/" + page)
		if err != nil {
			t.Fatal(err)
		}
		doc += string(b)
	}
	fields := map[string]bool{}
	yamlNames(reflect.TypeOf(gateway.Config{}), fields)
	for f := range fields {
		if !strings.Contains(doc, f) {
			t.Errorf("docs/configuration.md does not name the config field %q", f)
		}
	}
}

// TestReadmeConfigLoads: the README's minimal config, its placeholders
// filled with two keys' hashes, is a valid config.
func TestReadmeConfigLoads(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "```yaml\n")
	if i < 0 {
		t.Fatal("README has no yaml config")
	}
	doc := s[i+len("```yaml\n"):]
	doc = doc[:strings.Index(doc, "```")]
	for _, key := range []string{"first-key", "second-key"} {
		doc = strings.Replace(doc, "PASTE-HASH-HERE", tenant.HashKey(key), 1)
	}
	if _, err := gateway.Parse([]byte(doc)); err != nil {
		t.Fatalf("the README's config: %v", err)
	}
}
