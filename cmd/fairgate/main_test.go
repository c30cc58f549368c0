package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/deploy/examples"
	"github.com/fairgate/fairgate/tenant"
)

func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, examples.Demo, 0o600)
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, bytes.Replace(examples.Demo, []byte("rate: 20\n"), []byte("rate: 0\n"), 1), 0o600)

	var out, errb bytes.Buffer
	if code := run([]string{"check-config", good}, nil, &out, &errb); code != 0 || !strings.Contains(out.String(), "ok") {
		t.Fatalf("good config: exit %d, %q %q", code, out.String(), errb.String())
	}
	out.Reset()
	errb.Reset()
	if code := run([]string{"check-config", bad}, nil, &out, &errb); code != 1 || !strings.Contains(errb.String(), bad+": tiers.pro.rate: must be > 0") {
		t.Fatalf("bad config: exit %d, stderr %q", code, errb.String())
	}
	// serve refuses to start on a bad config: never "allow everything".
	errb.Reset()
	if code := run([]string{"serve", "--config", bad}, nil, &out, &errb); code != 1 || !strings.Contains(errb.String(), "tiers.pro.rate") {
		t.Fatalf("serve with a bad config: exit %d, stderr %q", code, errb.String())
	}
	if code := run([]string{"serve"}, nil, &out, &errb); code != 1 {
		t.Fatalf("serve without --config: exit %d", code)
	}
}

func TestHashKey(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"hash-key"}, strings.NewReader("demo-pro-key\n"), &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if got, want := strings.TrimSpace(out.String()), tenant.HashKey("demo-pro-key"); got != want {
		t.Fatalf("hash-key printed %q, want %q", got, want)
	}
	if code := run([]string{"hash-key"}, strings.NewReader(""), &out, &errb); code != 1 {
		t.Fatalf("empty stdin: exit %d", code)
	}
}

func TestUnknownCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"frobnicate"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "unknown command") {
		t.Fatalf("exit %d, %q", code, errb.String())
	}
}

// Asking for the Redis mode without a Redis is an error, not an empty
// report with exit status 0.
func TestBenchRedisModeNeedsRedis(t *testing.T) {
	var out, errb bytes.Buffer
	dir := filepath.Join(t.TempDir(), "out")
	code := run([]string{"bench", "--quiet", "--modes", "fairgate-redis", "--duration", "1s", "--out", dir}, nil, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "fairgate-redis needs a Redis address") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("%s was written", dir)
	}
}

// TestReadmeListsEveryFlag (issue 12): the README's Commands table lacked
// --upstream-listen, --log-level, --redis, --seed, --quiet and make build.
// Each command's flags, as its -h prints them, appear in its row.
func TestReadmeListsEveryFlag(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	rows := map[string]string{}
	for _, line := range strings.Split(readme, "\n") {
		for _, cmd := range []string{"serve", "demo", "demo-upstream", "bench"} {
			if strings.HasPrefix(line, "| `fairgate "+cmd+" ") || strings.HasPrefix(line, "| `fairgate "+cmd+"`") {
				rows[cmd] = line
			}
		}
	}
	flagName := regexp.MustCompile(`(?m)^  -([a-z-]+)`)
	for _, cmd := range []string{"serve", "demo", "demo-upstream", "bench"} {
		var out, errb bytes.Buffer
		run([]string{cmd, "-h"}, nil, &out, &errb)
		names := flagName.FindAllStringSubmatch(errb.String(), -1)
		if len(names) == 0 {
			t.Fatalf("%s -h printed no flags: %q", cmd, errb.String())
		}
		for _, n := range names {
			if !strings.Contains(rows[cmd], "--"+n[1]+" ") && !strings.Contains(rows[cmd], "--"+n[1]+"]") {
				t.Errorf("README's row for %s lacks --%s: %q", cmd, n[1], rows[cmd])
			}
		}
	}
	if !strings.Contains(readme, "make build") {
		t.Error("README does not mention make build")
	}
}
