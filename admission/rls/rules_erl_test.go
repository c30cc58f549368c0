package rls

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// erlSource returns the envoyproxy/ratelimit source tree named by ERL_SRC,
// or skips the test: CI has no copy of it. Its config files are read
// where they are, never copied here.
func erlSource(t *testing.T) string {
	t.Helper()
	src := os.Getenv("ERL_SRC")
	if src == "" {
		t.Skip("ERL_SRC is not set (e.g. ERL_SRC=/tmp/erlsrc, an envoyproxy/ratelimit checkout)")
	}
	if _, err := os.Stat(filepath.Join(src, "src", "config", "config_impl.go")); err != nil {
		t.Skipf("ERL_SRC=%s is not an envoyproxy/ratelimit tree: %v", src, err)
	}
	return src
}

// TestERLConfigsLoad: every config file of envoyproxy/ratelimit's
// integration tests and examples loads, each folder at once as
// envoyproxy/ratelimit reads it.
func TestERLConfigsLoad(t *testing.T) {
	src := erlSource(t)
	for _, dir := range []string{"test/integration/runtime/current/ratelimit/config", "examples/ratelimit/config"} {
		p := filepath.Join(src, dir)
		files, _ := filepath.Glob(filepath.Join(p, "*.yaml"))
		if len(files) == 0 {
			t.Errorf("%s: no config files", dir)
			continue
		}
		r, err := LoadRules([]string{p})
		if err != nil {
			t.Errorf("%s: %v", dir, err)
			continue
		}
		if len(r.Domains()) != len(files) {
			t.Errorf("%s: domains %v from %d files", dir, r.Domains(), len(files))
		}
	}
}

// TestERLUnitConfigs: envoyproxy/ratelimit's config unit tests' files
// load here when they load there, and are refused when refused there.
func TestERLUnitConfigs(t *testing.T) {
	dir := filepath.Join(erlSource(t), "test", "config")
	load := func(l Loader, names ...string) error {
		var paths []string
		for _, n := range names {
			paths = append(paths, filepath.Join(dir, n))
		}
		_, err := l.Load(paths)
		return err
	}
	for _, n := range []string{"basic_config.yaml", "shadowmode_config.yaml", "share_threshold.yaml", "wildcard.yaml", "metadata.yaml"} {
		if err := load(Loader{}, n); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if err := load(Loader{MergeDomains: true}, "merge_domain_key1.yaml", "merge_domain_key2.yaml"); err != nil {
		t.Errorf("merged: %v", err)
	}
	for _, tc := range []struct {
		names []string
		merge bool
		want  string // in the error
	}{
		{[]string{"merge_domain_key1.yaml", "merge_domain_key2.yaml"}, false, "rls.merge_domain_config: true"},
		{[]string{"basic_config.yaml", "duplicate_domain.yaml"}, false, "already configured"},
		{[]string{"bad_limit_unit.yaml"}, false, `unknown unit "foo"`},
		{[]string{"bad_yaml.yaml"}, false, "yaml"},
		{[]string{"duplicate_key.yaml"}, false, "configured twice"},
		{[]string{"empty_domain.yaml"}, false, "domain: required"},
		{[]string{"empty_key.yaml"}, false, "key: required"},
		{[]string{"misspelled_key.yaml"}, false, `unknown field "ratelimit"`},
		{[]string{"misspelled_key2.yaml"}, false, `unknown field "requestsperunit"`},
		{[]string{"non_map_list.yaml"}, false, "want a mapping"},
		{[]string{"non_string_key.yaml"}, false, `unknown field "0.25"`},
		{[]string{"replaces_empty.yaml"}, false, "name: required"},
		{[]string{"replaces_self.yaml"}, false, "own name"},
		{[]string{"unlimited_with_unit.yaml"}, false, "an unlimited rate limit has no unit"},
	} {
		err := load(Loader{MergeDomains: tc.merge}, tc.names...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error with %q", tc.names, err, tc.want)
		}
	}
}

// TestERLWildcardsAndSharing: on envoyproxy/ratelimit's own wildcard and
// share_threshold test configs, each descriptor reaches the limit
// envoyproxy/ratelimit gives it, in a bucket named as envoyproxy/ratelimit
// names its cache key.
func TestERLWildcardsAndSharing(t *testing.T) {
	dir := filepath.Join(erlSource(t), "test", "config")
	for _, tc := range []struct {
		file, spec string
		rpu        uint32 // 0: not limited
		bucket     string // the entries naming the bucket; "" means spec
	}{
		{"wildcard.yaml", "wild=foo1", 20, ""},
		{"wildcard.yaml", "wild=bar", 0, ""},
		{"wildcard.yaml", "noWild=foo1", 0, ""},
		{"wildcard.yaml", "noVal=x", 20, ""},
		{"wildcard.yaml", "midWild=barab", 20, ""},
		{"wildcard.yaml", "midWild=bara", 0, ""},
		{"wildcard.yaml", "multiWild=fooXbarYbaz", 10, ""},
		{"wildcard.yaml", "multiWild=foobaz", 0, ""},
		{"wildcard.yaml", "nestedWild=val1,wild=goo2", 20, ""},
		{"share_threshold.yaml", "files=files/a", 100, "files=files/*"},
		{"share_threshold.yaml", "nested=parent,files=nested/x", 200, "nested=parent,files=nested/*"},
		{"share_threshold.yaml", "files=top/a,files=nested/b", 300, "files=top/*,files=nested/*"},
		{"share_threshold.yaml", "route=api/v1,method=GET", 60, "route=api/*,method=GET"},
		{"share_threshold.yaml", "service=svc/a,endpoint=e", 80, "service=svc/*,endpoint=e"},
		{"share_threshold.yaml", "path=path/1,file=file/2,type=t", 120, "path=path/*,file=file/2,type=t"},
		{"share_threshold.yaml", "user=user/1,resource=res/2,action=r", 150, "user=user/*,resource=res/*,action=r"},
		{"share_threshold.yaml", "file=test1", 50, ""},
		{"share_threshold.yaml", "file=test2", 100, "file=test*"},
		{"share_threshold.yaml", "midpath=/apiXv1", 100, "midpath=/api*v1"},
		{"share_threshold.yaml", "multiroute=svcAepBrpc", 50, "multiroute=svc*ep*rpc"},
		{"share_threshold.yaml", "tenant=tAprod,resource=resXv2", 60, "tenant=t*prod,resource=res*v2"},
	} {
		r, err := LoadRules([]string{filepath.Join(dir, tc.file)})
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		n := reach(r, "test-domain", tc.spec)
		var rpu uint32
		if n != nil && n.limit != nil {
			rpu = n.limit.requestsPerUnit
		}
		if rpu != tc.rpu {
			t.Errorf("%s %s: %d per unit, want %d", tc.file, tc.spec, rpu, tc.rpu)
		}
		if rpu == 0 {
			continue
		}
		want := tc.bucket
		if want == "" {
			want = tc.spec
		}
		tag := r.domains["test-domain"].tag
		if got, want := n.limit.bucketKey(tag, entries(tc.spec)), bucketKey(tag, entries(want)); got != want {
			t.Errorf("%s %s: bucket %+v, want %+v", tc.file, tc.spec, got, want)
		}
	}
}
