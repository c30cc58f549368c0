package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fairgate/fairgate/deploy/examples"
)

const rlsRules = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// startCmd runs a fairgate subcommand until the test ends and returns the
// address its "fairgate rls listening" log line gives.
func startCmd(t *testing.T, cmd func(context.Context, []string, io.Writer) error, args ...string) string {
	t.Helper()
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd(ctx, args, pw); pw.Close() }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%v: %v", args, err)
		}
	})
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "fairgate rls listening" {
				addr <- line.Addr
			}
		}
		io.Copy(io.Discard, pr)
	}()
	select {
	case a := <-addr:
		return a
	case err := <-done:
		done <- nil // for the cleanup
		t.Fatalf("%v exited: %v", args, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("%v: no rls listening line within 10s", args)
	}
	return ""
}

// overAfter calls the service at addr until it answers OVER_LIMIT and
// returns how many calls it admitted first.
func overAfter(t *testing.T, addr string) int {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rlsv3.NewRateLimitServiceClient(conn)
	req := &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*commonrl.RateLimitDescriptor{
		{Entries: []*commonrl.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.1.1.1"}}}}}
	for i := range 10 {
		resp, err := c.ShouldRateLimit(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			return i
		}
	}
	t.Fatal("never over the limit")
	return 0
}

// TestRLSCommand: `fairgate rls` serves Envoy's API from a config that
// holds only rls (no upstream, tenants or routes); check-config --rls
// checks the rule files too.
func TestRLSCommand(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(rlsRules), 0o600)
	cfg := filepath.Join(dir, "fairgate.yaml")
	os.WriteFile(cfg, []byte("admin_listen: 127.0.0.1:0\nrls:\n  listen: 127.0.0.1:0\n  configs: ["+dir+"/edge.yaml]\n"), 0o600)
	addr := startCmd(t, rlsCmd, "--config", cfg)
	if n := overAfter(t, addr); n != 2 {
		t.Fatalf("admitted %d before OVER_LIMIT, want 2", n)
	}
	var out, errb strings.Builder
	if code := run([]string{"check-config", "--rls", cfg}, nil, &out, &errb); code != 0 || !strings.Contains(out.String(), "rls ok (domains: edge)") {
		t.Fatalf("check-config --rls: exit %d, %q %q", code, out.String(), errb.String())
	}
	os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(strings.Replace(rlsRules, "minute", "minut", 1)), 0o600)
	errb.Reset()
	if code := run([]string{"check-config", "--rls", cfg}, nil, &out, &errb); code != 1 || !strings.Contains(errb.String(), `edge.yaml: descriptors[0].rate_limit.unit: unknown unit "minut"`) {
		t.Fatalf("check-config --rls with a typo: exit %d, %q", code, errb.String())
	}
}

// TestServeWithRLS: `fairgate serve` with an rls section starts the rate
// limit service beside the gateway.
func TestServeWithRLS(t *testing.T) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "rls.d")
	os.Mkdir(rules, 0o700)
	os.WriteFile(filepath.Join(rules, "edge.yaml"), []byte(rlsRules), 0o600)
	cfg := filepath.Join(dir, "fairgate.yaml")
	data := string(examples.Demo) + "\nrls:\n  listen: 127.0.0.1:0\n  configs: [" + rules + "]\n"
	data = setTop(data, "listen", "127.0.0.1:0")
	data = setTop(data, "admin_listen", "127.0.0.1:0")
	os.WriteFile(cfg, []byte(data), 0o600)
	addr := startCmd(t, serve, "--config", cfg, "--drain", "1s")
	if n := overAfter(t, addr); n != 2 {
		t.Fatalf("admitted %d before OVER_LIMIT, want 2", n)
	}
}

// setTop sets a top-level scalar key of a YAML document, replacing its
// line or adding one.
func setTop(doc, key, value string) string {
	lines := strings.Split(doc, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, key+":") {
			lines[i] = key + ": " + value
			return strings.Join(lines, "\n")
		}
	}
	return key + ": " + value + "\n" + doc
}
