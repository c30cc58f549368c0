package gateway

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/deploy/examples"
	"github.com/fairgate/fairgate/internal/fakeclock"
)

// watched runs WatchConfig on path and returns a channel of reload outcomes.
func watched(t *testing.T, srv *Server, path string, hup chan os.Signal) <-chan error {
	t.Helper()
	outcomes := make(chan error, 16)
	cw, err := srv.WatchConfig(path, WatchOptions{Reload: hup, Settle: 20 * time.Millisecond,
		OnReload: func(err error) { outcomes <- err }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cw.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchConfig: %v", err)
		}
	})
	return outcomes
}

func nextOutcome(t *testing.T, c <-chan error) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("no reload within 5s")
		return nil
	}
}

// writeAtomically writes data as editors do: a temporary file renamed over
// the target.
func writeAtomically(t *testing.T, path string, data string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func demoWithUpstream(upstream string) string {
	return strings.Replace(string(examples.Demo), "upstream: http://127.0.0.1:8081", "upstream: "+upstream, 1)
}

func TestWatchConfigReloads(t *testing.T) {
	clk := fakeclock.New()
	base, _, srv := startGateway(t, nil, Options{Now: clk.Now})
	upstream := srv.cfg.Load().Upstream
	dir := t.TempDir()
	path := filepath.Join(dir, "fairgate.yaml")
	doc := demoWithUpstream(upstream)
	writeAtomically(t, path, doc)
	outcomes := watched(t, srv, path, nil)

	// Spend the starter's burst of 25.
	for range 5 {
		do(t, "GET", base+"/api/v1/search", "demo-starter-key", nil)
	}
	// Editor noise changes nothing: no reload is reported for it (the
	// next outcome below belongs to the real change).
	os.WriteFile(filepath.Join(dir, ".fairgate.yaml.swp"), []byte("x"), 0o600)
	os.WriteFile(filepath.Join(dir, "fairgate.yaml~"), []byte(doc), 0o600)

	// A bigger starter burst applies to the existing bucket: not reset
	// (still empty now), but allowed to fill to 50.
	bigger := strings.Replace(doc, "burst: 25\n", "burst: 50\n", 1)
	writeAtomically(t, path, bigger)
	if err := nextOutcome(t, outcomes); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if st, _ := srv.Gate().TenantState("initech"); st.Burst != 50 || st.Tokens == nil || *st.Tokens > 1 {
		t.Fatalf("after reload: burst %v tokens %v, want 50 and the old (empty) bucket", st.Burst, *st.Tokens)
	}
	if r := do(t, "GET", base+"/api/v1/search", "demo-starter-key", nil); r.status != 429 {
		t.Fatalf("the reload reset the bucket: %d", r.status)
	}
	clk.Advance(10 * time.Second)
	if st, _ := srv.Gate().TenantState("initech"); *st.Tokens != 50 {
		t.Fatalf("tokens after 10s: %v, want 50", *st.Tokens)
	}

	// An invalid file keeps the old config and says which field.
	writeAtomically(t, path, strings.Replace(bigger, "rate: 20\n", "rate: -1\n", 1))
	err := nextOutcome(t, outcomes)
	if err == nil || !strings.Contains(err.Error(), "tiers.pro.rate: must be > 0") || !strings.Contains(err.Error(), path) {
		t.Fatalf("invalid reload: %v", err)
	}
	if st, _ := srv.Gate().TenantState("initech"); st.Burst != 50 {
		t.Fatalf("a failed reload changed the config: burst %v", st.Burst)
	}
}

// TestWatchConfigMapSwap: a Kubernetes ConfigMap volume holds
// config.yaml -> ..data/config.yaml, and ..data -> ..<timestamp>; an update
// writes a new timestamped folder and renames a new ..data symlink over the
// old one.
func TestWatchConfigMapSwap(t *testing.T) {
	_, _, srv := startGateway(t, nil, Options{Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	upstream := srv.cfg.Load().Upstream
	dir := t.TempDir()
	version := func(name, doc string) {
		os.Mkdir(filepath.Join(dir, name), 0o700)
		os.WriteFile(filepath.Join(dir, name, "config.yaml"), []byte(doc), 0o600)
		os.Symlink(name, filepath.Join(dir, "..data_tmp"))
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	doc := demoWithUpstream(upstream)
	version("..2026_11_30_01", doc)
	path := filepath.Join(dir, "config.yaml")
	if err := os.Symlink("..data/config.yaml", path); err != nil {
		t.Fatal(err)
	}
	outcomes := watched(t, srv, path, nil)
	version("..2026_11_30_02", strings.Replace(doc, "burst: 25\n", "burst: 40\n", 1))
	if err := nextOutcome(t, outcomes); err != nil {
		t.Fatal(err)
	}
	if st, _ := srv.Gate().TenantState("initech"); st.Burst != 40 {
		t.Fatalf("after the ConfigMap swap: burst %v, want 40", st.Burst)
	}
}

func TestWatchConfigSignal(t *testing.T) {
	_, _, srv := startGateway(t, nil, Options{})
	dir := t.TempDir()
	path := filepath.Join(dir, "fairgate.yaml")
	writeAtomically(t, path, demoWithUpstream(srv.cfg.Load().Upstream))
	hup := make(chan os.Signal, 1)
	outcomes := watched(t, srv, path, hup)
	hup <- os.Interrupt // any signal value: the channel is the trigger
	if err := nextOutcome(t, outcomes); err != nil {
		t.Fatal(err)
	}
}

func TestReloadPools(t *testing.T) {
	// A fixed total (no adaptive limit), which a reload may change.
	_, _, srv := startGateway(t, func(c *Config) { c.Admission.Adaptive = nil }, Options{})
	cfg := *srv.cfg.Load()
	bh := *cfg.Admission.Bulkhead
	bh.Pools = maps.Clone(bh.Pools)
	p := bh.Pools["pro"]
	p.Share = 90
	bh.Pools["pro"] = p
	cfg.Admission.Bulkhead = &bh
	if err := srv.Reload(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "bulkhead.pools: changing pools needs a restart") {
		t.Fatalf("Reload with a changed pool: %v", err)
	}
	// The total alone can change: the pools' seats follow.
	bh = *srv.cfg.Load().Admission.Bulkhead
	bh.Total = 32
	cfg = *srv.cfg.Load()
	cfg.Admission.Bulkhead = &bh
	if err := srv.Reload(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if st, _ := srv.Gate().TenantState("acme"); st.PoolStats == nil || st.PoolStats.Seats != 16 {
		t.Fatalf("enterprise seats after total 32: %+v, want 16", st.PoolStats)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }
