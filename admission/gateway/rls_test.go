package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/fairgate/fairgate/admission/rls"
	"github.com/fairgate/fairgate/internal/redistest"
)

func rlsRule(rpu string) string {
	return "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: " + rpu + "}\n"
}

// TestParseRLSOnly: `fairgate rls` needs only the rls section; serve's
// required fields are not asked for, and a file without rls is refused by
// name.
func TestParseRLSOnly(t *testing.T) {
	c, err := ParseRLS([]byte("rls:\n  configs: [a.yaml]\nredis:\n  addrs: [127.0.0.1:6379]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.RLS.ListenAddr(); got != "127.0.0.1:8089" {
		t.Errorf("rls.listen default %q", got)
	}
	for _, tc := range []struct{ yaml, want string }{
		{"redis:\n  addrs: [127.0.0.1:6379]\n", "rls: required"},
		{"rls:\n  listen: nope\n", `rls.listen: "nope" is not host:port`},
		{"rls:\n  configs: [a.yaml]\n  confgs: []\n", "rls.confgs: unknown field"},
		{"rls:\n  configs: [a.yaml]\n  tls: {cert_file: c.pem}\n", "rls.tls.key_file: required"},
		{"rls:\n  configs: [a.yaml]\n  max_descriptors: -1\n", "rls.max_descriptors: must be >= 0"},
	} {
		if _, err := ParseRLS([]byte(tc.yaml)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %s", tc.yaml, err, tc.want)
		}
	}
	// The bounds and TLS are read beside the other fields.
	c, err = ParseRLS([]byte("rls:\n  configs: [a.yaml]\n  max_descriptors: 8\n  max_entries: 4\n  max_request_bytes: 1024\n" +
		"  max_concurrent_streams: 16\n  near_limit_ratio: 0.5\n  response_headers: true\n" +
		"  tls: {cert_file: c.pem, key_file: k.pem, client_ca_file: ca.pem}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if l := c.RLS.Limits; l != (rls.Limits{MaxDescriptors: 8, MaxEntries: 4, MaxRequestBytes: 1024, MaxConcurrentStreams: 16}) ||
		c.RLS.NearLimitRatio != 0.5 || !c.RLS.ResponseHeaders || *c.RLS.TLS != (rls.TLSConfig{CertFile: "c.pem", KeyFile: "k.pem", ClientCAFile: "ca.pem"}) {
		t.Errorf("rls section: %+v", c.RLS)
	}
	// serve still wants its own fields with an rls section.
	if _, err := Parse([]byte("rls:\n  configs: [a.yaml]\n")); err == nil || !strings.Contains(err.Error(), "upstream: required") {
		t.Errorf("serve without upstream: %v", err)
	}
}

// TestRLSOnlyReloadsRules: the rule files of `fairgate rls` reload when
// written; a bad one keeps the old rules.
func TestRLSOnlyReloadsRules(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "d.yaml")
	writeAtomically(t, path, rlsRule("1"))
	r := newRLSOnly(t, ParseRLS, []byte("rls:\n  configs: ["+dir+"]\n"))
	outcomes := make(chan error, 10)
	run, err := WatchRLS(r.Server(), nil, WatchOptions{Settle: 10 * time.Millisecond, OnReload: func(err error) { outcomes <- err }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	defer func() { cancel(); <-done }()
	limit := func() uint32 {
		t.Helper()
		resp, err := r.Server().Service().ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d",
			Descriptors: []*commonrl.RateLimitDescriptor{{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0].CurrentLimit.GetRequestsPerUnit()
	}
	if got := limit(); got != 1 {
		t.Fatalf("limit %d, want 1", got)
	}
	writeAtomically(t, path, rlsRule("9"))
	if err := nextOutcome(t, outcomes); err != nil {
		t.Fatal(err)
	}
	if got := limit(); got != 9 {
		t.Fatalf("after the write: limit %d, want 9", got)
	}
	writeAtomically(t, path, rlsRule("nine"))
	for nextOutcome(t, outcomes) == nil { // a late reload of the good file may come first
	}
	if got := limit(); got != 9 {
		t.Fatalf("after a bad write: limit %d, want the old 9", got)
	}
}

// TestEnvoyExampleLoads: deploy/examples/envoy's config and its rule
// folder (a path relative to the config file) load from any working
// directory, and the example's limits decide as its comments say.
func TestEnvoyExampleLoads(t *testing.T) {
	r := newRLSOnly(t, func([]byte) (Config, error) { return LoadRLS("../../deploy/examples/envoy/fairgate-rls.yaml") }, nil)
	login := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{{Entries: []*commonrl.RateLimitDescriptor_Entry{
		{Key: "header_match", Value: "login"}, {Key: "remote_address", Value: "10.0.0.7"}}}}}
	for i := range 6 {
		resp, err := r.Server().Service().ShouldRateLimit(context.Background(), login)
		if err != nil {
			t.Fatal(err)
		}
		if want := i == 5; (resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT) != want {
			t.Fatalf("login %d: %v (limit %v)", i+1, resp.OverallCode, resp.Statuses[0].CurrentLimit)
		}
	}
}

// newRLSOnly builds the rate limit service alone from parse(data), closed
// when t ends.
func newRLSOnly(t *testing.T, parse func([]byte) (Config, error), data []byte) *RLSOnly {
	t.Helper()
	cfg, err := parse(data)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRLSOnly(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// TestRLSStoreMetrics: the rate limit service alone on Redis exports the
// shared store's families (breaker, failure policy) as the gateway does,
// though no gate registers them there; on the embedded store it does not.
func TestRLSStoreMetrics(t *testing.T) {
	dir := t.TempDir()
	writeAtomically(t, filepath.Join(dir, "d.yaml"), rlsRule("1"))
	srv := redistest.StartServer(t)
	for _, tc := range []struct {
		name, redis string
		want        bool
	}{{"redis", "redis:\n  addrs: [" + srv.Addr() + "]\n", true}, {"embedded", "", false}} {
		r := newRLSOnly(t, ParseRLS, []byte("rls:\n  configs: ["+dir+"]\n"+tc.redis))
		adm := httptest.NewServer(r.AdminHandler())
		resp, err := http.Get(adm.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		adm.Close()
		for _, name := range []string{"fairgate_store_breaker_state", "fairgate_store_policy_decisions_total"} {
			if got := strings.Contains(string(body), "\n"+name+"{"); got != tc.want {
				t.Errorf("%s: /metrics has %s: %v, want %v", tc.name, name, got, tc.want)
			}
		}
	}
}
