package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fairgate/fairgate/admission/gateway"
	"github.com/fairgate/fairgate/deploy/examples"
)

// checkFile writes doc to a temporary file, runs check-config on it and
// returns its path, exit code, stdout and stderr.
func checkFile(t *testing.T, doc string, args ...string) (path string, code int, stdout, stderr string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "fairgate.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code = run(append(append([]string{"check-config"}, args...), path), nil, &out, &errb)
	return path, code, out.String(), errb.String()
}

// edit returns the demo config with each old replaced by its new, and
// fails if the demo no longer holds one of them.
func edit(t *testing.T, pairs ...string) string {
	t.Helper()
	doc := string(examples.Demo)
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.Contains(doc, pairs[i]) {
			t.Fatalf("the demo config has no %q", pairs[i])
		}
		doc = strings.Replace(doc, pairs[i], pairs[i+1], 1)
	}
	return doc
}

// wantAll fails t for each of wants that out lacks.
func wantAll(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// poolRows returns the bulkhead table's rows, by pool, as their cells.
func poolRows(t *testing.T, out string) map[string][]string {
	t.Helper()
	rows := map[string][]string{}
	in := false
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) > 0 && f[0] == "POOL":
			in = true
		case in && len(f) == 0:
			in = false
		case in:
			rows[f[0]] = f
		}
	}
	if len(rows) == 0 {
		t.Fatalf("no pool table in:\n%s", out)
	}
	return rows
}

// TestCheckConfigShowsSeatsAndTiers: the demo's 16 seats, shared 50:30:20,
// are 8, 5 and 3 — the floors 8, 4, 3 and the one left over to pro's
// largest remainder (.8). The ceil() the configuration reference used to
// give says 8, 5, 4: 17 seats of 16, which the test tells apart. Before,
// check-config printed only "ok (3 tiers, 3 tenants, 3 routes)".
func TestCheckConfigShowsSeatsAndTiers(t *testing.T) {
	_, code, out, errs := checkFile(t, string(examples.Demo))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	rows := poolRows(t, out)
	want := map[string]int{"enterprise": 8, "pro": 5, "starter": 3}
	sum, ceilSum := 0, 0
	for pool, seats := range want {
		r := rows[pool]
		if len(r) < 3 {
			t.Fatalf("no row for pool %s in:\n%s", pool, out)
		}
		got, _ := strconv.Atoi(r[2])
		share, _ := strconv.Atoi(r[1])
		if got != seats {
			t.Errorf("pool %s: %d seats, want %d", pool, got, seats)
		}
		sum += got
		ceilSum += (16*share + 99) / 100
	}
	if sum != 16 {
		t.Errorf("the pools' seats add up to %d, want the total 16", sum)
	}
	if ceilSum == 16 {
		t.Error("negative control: ceil(total × share ÷ Σshares) adds up to the total here too, so the test proves nothing")
	}
	if all := rows["(all)"]; len(all) < 3 || all[2] != "16" {
		t.Errorf("(all) row = %q, want 16 seats", all)
	}
	// With the adaptive limit, seats at its bounds: at 4, one seat each
	// to pro and starter (every pool keeps one).
	if r := rows["pro"]; len(r) < 5 || strings.Join(r[:5], " ") != "pro 30 5 1 10" {
		t.Errorf("pro's row = %q, want share 30, 5 seats, 1 at 4 and 10 at 32", r)
	}
	wantAll(t, out,
		"16 seats to start (adaptive.initial",
		"largest remainders",
		"enterprise  100   500    16 (+4 critical)  2",
		"pro         20    100    4 (+1 critical)   1",
		"tier starter",
		"up to 2",
		"500ms",
		"global backstop: rate 100, burst 600, window 1s",
		"adaptive: starts at 16, learns between 4 and 32",
		"shedding: on")
}

// TestCheckConfigSeatsFixedTotal: without adaptive, bulkhead.total is
// divided; 10 seats at 1:1:1 are 4, 3, 3 (the tie of remainders goes by
// name). Limits (a fixed window too), groups, per-tenant overrides and the per-instance cap on
// Redis are shown where the file sets them.
func TestCheckConfigSeatsFixedTotal(t *testing.T) {
	doc := edit(t,
		"  total: 16\n", "  total: 10\n",
		"share: 50,", "share: 1,", "share: 30,", "share: 1,", "share: 20,", "share: 1,",
		"adaptive:\n  min: 4\n  max: 32\n  initial: 16\n  max_latency: 1500ms\n", "",
		"    # limits: [{name: daily, burst: 100000, per: 24h}]\n", "    limits: [{name: daily, burst: 100000, per: 24h}, {name: monthly, burst: 1000000, per: month, window: fixed, time_zone: Europe/Berlin}]\n    groups: {exports: {rate: 1, burst: 40}}\n",
		"    tier: pro\n", "    tier: pro\n    rate: 40\n    exempt: true\n",
		"    path: /api/v1/reports/export\n", "    path: /api/v1/reports/export\n    group: exports\n",
	) + "redis:\n  addrs: [127.0.0.1:6379]\n  mode: sync\n"
	_, code, out, errs := checkFile(t, doc)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	rows := poolRows(t, out)
	for pool, want := range map[string]string{"enterprise": "4", "pro": "3", "starter": "3", "(all)": "10"} {
		if r := rows[pool]; len(r) < 3 || r[2] != want {
			t.Errorf("pool %s: row %q, want %s seats", pool, r, want)
		}
	}
	wantAll(t, out,
		"10 seats to start (bulkhead.total)",
		"limit daily: burst 100000 per 24h (sync (redis.mode))",
		"limit monthly: 1000000 per window, fixed windows of a calendar month in Europe/Berlin (exact: a window always is)",
		"group exports: rate 1, burst 40",
		"globex (pro): rate 40, exempt",
		"max_concurrent is kept per instance",
		"sync (redis.mode)")
	if strings.Contains(out, "adaptive") || strings.Contains(out, "AT ") {
		t.Errorf("an adaptive limit shown without an adaptive section:\n%s", out)
	}
}

// TestCheckConfigEveryErrorInOneRun: a file with a misspelt field, a
// misspelt criticality (which stops yaml.v3 where it stands) and two
// semantic errors gets all four in one run, each once, with the lines of
// the file. The negative control is Load, which check-config called
// before: it stops at the first stage that fails and reports one of them.
func TestCheckConfigEveryErrorInOneRun(t *testing.T) {
	doc := edit(t,
		"criticality: critical\n", "criticality: critcal\n", // line 62
		"    max_concurrent: 4\n", "    max_concurent: 4\n", // line 38
		"    tier: starter\n", "    tier: startr\n",
		"  burst: 600\n", "  burst: 0\n", // global.burst
	)
	path, code, _, errs := checkFile(t, doc)
	if code != 1 {
		t.Fatalf("exit %d, want 1: %s", code, errs)
	}
	wants := []string{
		`routes[0].criticality: unknown criticality "critcal"`,
		"tiers.pro.max_concurent: unknown field (line 38)",
		`tenants[2] (initech).tier: unknown tier "startr"`,
		"global.burst: must be >= 1",
	}
	for _, want := range wants {
		if n := strings.Count(errs, want); n != 1 {
			t.Errorf("%q reported %d times, want once, in:\n%s", want, n, errs)
		}
	}
	for _, l := range strings.Split(strings.TrimSpace(strings.TrimPrefix(errs, "fairgate check-config: ")), "\n") {
		if !strings.HasPrefix(l, path+": ") {
			t.Errorf("line %q does not start with the file", l)
		}
	}
	// Negative control: Load (and so serve, and check-config before)
	// reports only the first that stops it.
	_, err := gateway.Load(path)
	found := 0
	for _, want := range wants {
		if err != nil && strings.Contains(err.Error(), want) {
			found++
		}
	}
	if found != 1 {
		t.Errorf("negative control: Load reported %d of the 4 errors, want 1: %v", found, err)
	}
	// What cannot be taken out safely stops the search: a duration
	// without a unit would read as missing, so its semantic errors
	// (none are made up) wait until it is fixed.
	_, code, _, errs = checkFile(t, edit(t, "upstream_timeout: 10s\n", "upstream_timeout: 10\n", "    rank: 2\n", "    rnak: 2\n", "  burst: 600\n", "  burst: 0\n"))
	if code != 1 || !strings.Contains(errs, "server.upstream_timeout: cannot unmarshal") || !strings.Contains(errs, "tiers.enterprise.rnak: unknown field") || strings.Contains(errs, "global.burst") {
		t.Errorf("a type error with a typo: exit %d, %s", code, errs)
	}
}

// TestCheckConfigDidYouMean: a misspelt field gets the nearest field of its
// type, a misspelt tier or pool the nearest configured one; a name near
// nothing gets no guess.
func TestCheckConfigDidYouMean(t *testing.T) {
	tests := []struct {
		name  string
		edits []string
		want  string
	}{
		{"field", []string{"    max_concurrent: 4\n", "    max_concurent: 4\n"}, "tiers.pro.max_concurent: unknown field (line 38); did you mean `max_concurrent`?"},
		{"route field", []string{"    cost: 5\n", "    cots: 5\n"}, "routes[1].cots: unknown field (line 70); did you mean `cost`?"},
		{"pool field", []string{"queue_length: 8,", "queue_lenght: 8,"}, "bulkhead.pools.enterprise.queue_lenght: unknown field (line 96); did you mean `queue_length`?"},
		{"top-level field", []string{"global:\n", "globl:\n"}, "globl: unknown field (line 79); did you mean `global`?"},
		{"tier", []string{"    tier: starter\n", "    tier: startr\n"}, `tenants[2] (initech).tier: unknown tier "startr" (have enterprise, pro, starter); did you mean ` + "`starter`?"},
		{"tier's pool", []string{"    starter:    {share: 20", "    startr:    {share: 20"}, "tiers.starter.pool: no pool \"starter\" under bulkhead.pools (a tier uses the pool named like it unless tiers.starter.pool says otherwise); did you mean `startr`?"},
		{"route's pool", []string{"    cost: 5\n", "    cost: 5\n    pool: prp\n"}, "routes[1].pool: unknown pool \"prp\"; did you mean `pro`?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, code, _, errs := checkFile(t, edit(t, tt.edits...))
			if code != 1 || !strings.Contains(errs, tt.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant %q", code, errs, tt.want)
			}
		})
	}
	// Negative controls: far from every name, no guess.
	_, _, _, errs := checkFile(t, edit(t, "    max_concurrent: 4\n", "    xyzzy: 4\n", "    tier: starter\n", "    tier: platinum\n"))
	if !strings.Contains(errs, "tiers.pro.xyzzy: unknown field") || !strings.Contains(errs, `unknown tier "platinum"`) || strings.Contains(errs, "did you mean") {
		t.Errorf("a name near nothing: %s", errs)
	}
}

// packagePrefix matches a Go package's name where a field's path should
// be: after the file (at the start of a line) or after another path.
var packagePrefix = regexp.MustCompile(`(^|: )(shed|admission|tenant|bulkhead|redisstore|gateway|ratelimit|fairshare): `)

// TestCheckConfigNoPackagePrefixes: every message names the field in the
// file, and never the Go package that checked it ("shed: unknown
// criticality" was one), nor the field twice. Each word that a type
// decodes itself is misspelt, and each package's validation is provoked.
func TestCheckConfigNoPackagePrefixes(t *testing.T) {
	tests := []struct {
		name  string
		edits []string
		extra string // appended to the file
		want  string
	}{
		{"criticality", []string{"criticality: sheddable\n", "criticality: shedable\n"}, "", `routes[2].criticality: unknown criticality "shedable"`},
		{"encoded_slashes", []string{"routes:\n", "encoded_slashes: decode\nroutes:\n"}, "", `encoded_slashes: "decode" is not refuse or allow`},
		{"auth", []string{"    cost: 5\n", "    cost: 5\n    auth: nobody\n"}, "", `routes[1].auth: "nobody" is not key or none`},
		{"engine", []string{"server:\n", "server:\n  engine: netty\n"}, "", `server.engine: "netty" is not net/http or fasthttp`},
		{"redis.mode", nil, "redis: {addrs: [127.0.0.1:6379], mode: exakt}\n", `redis.mode: unknown mode "exakt"`},
		{"redis.failure_policy", nil, "redis: {addrs: [127.0.0.1:6379], failure_policy: fail_shut}\n", `redis.failure_policy: unknown failure_policy "fail_shut"`},
		{"redis.backstop_mode", nil, "redis: {addrs: [127.0.0.1:6379], backstop_mode: synk}\n", `redis.backstop_mode: unknown backstop_mode "synk"`},
		{"tracing.protocol", nil, "tracing: {endpoint: http://127.0.0.1:4318, protocol: grpcx}\n", `tracing.protocol: unknown OTLP protocol "grpcx"`},
		{"adaptive", []string{"  min: 4\n", "  min: 40\n"}, "", "adaptive.max: must be >= adaptive.min (40)"},
		{"shedding", []string{"  max_retry_after: 30s\n", "  max_retry_after: 1ms\n"}, "", "shedding.max_retry_after: must be >= shedding.calibration_interval"},
		{"bulkhead", []string{"share: 30,", "share: 0,"}, "", "bulkhead.pools.pro.share: must be between 1 and 1000000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, code, _, errs := checkFile(t, edit(t, tt.edits...)+tt.extra)
			if code != 1 || !strings.Contains(errs, tt.want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant %q", code, errs, tt.want)
			}
			for _, l := range strings.Split(strings.TrimSpace(errs), "\n") {
				msg := strings.TrimPrefix(strings.TrimPrefix(l, "fairgate check-config: "), path+": ")
				if m := packagePrefix.FindString(msg); m != "" {
					t.Errorf("%q carries a package prefix (%q)", msg, m)
				}
				if field, rest, ok := strings.Cut(msg, ": "); ok && strings.HasPrefix(rest, field+": ") {
					t.Errorf("%q names its field twice", msg)
				}
			}
		})
	}
	// The pattern itself finds what it is for (negative control).
	if !packagePrefix.MatchString(`routes[2].criticality: shed: unknown criticality "shedable"`) {
		t.Error("packagePrefix misses the message of the issue")
	}
}

// TestCheckConfigUsage: a wrong command line is a usage error, not a
// check of some file.
func TestCheckConfigUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"check-config", "a.yaml", "b.yaml"}, nil, &out, &errb); code != 1 || !strings.Contains(errb.String(), "usage: fairgate check-config [--rls] FILE") {
		t.Errorf("two files: exit %d, %q", code, errb.String())
	}
}
