package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/admission/rls"
	"github.com/fairgate/fairgate/deploy/examples"
	"github.com/fairgate/fairgate/internal/fakeclock"
)

// watched runs WatchConfig on path with o (Settle 20ms unless set) and
// returns a channel of reload outcomes.
func watched(t *testing.T, srv *Server, path string, o WatchOptions) <-chan error {
	t.Helper()
	if o.Settle == 0 {
		o.Settle = 20 * time.Millisecond
	}
	outcomes := make(chan error, 16)
	o.OnReload = func(err error) { outcomes <- err }
	cw, err := srv.WatchConfig(path, o)
	if err != nil {
		t.Fatal(err)
	}
	running(t, cw.Run)
	return outcomes
}

// running runs a watcher's run until t ends; its error fails t.
func running(t *testing.T, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("watcher: %v", err)
		}
	})
}

// nextOutcome waits for the next reload. The deadline is generous: only a
// watcher that never reloads reaches it.
func nextOutcome(t *testing.T, c <-chan error) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("no reload within 10s")
		return nil
	}
}

// keepWriting writes the file at path every interval until t ends, as a
// log or a database beside the config does.
func keepWriting(t *testing.T, path string, every time.Duration) {
	t.Helper()
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
				if err := os.WriteFile(path, []byte(strconv.Itoa(i)), 0o600); err != nil {
					t.Errorf("busy sibling: %v", err)
					return
				}
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
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
	outcomes := watched(t, srv, path, WatchOptions{})

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
// writes a new timestamped folder, renames a new ..data symlink over the
// old one and removes the old folder. Twice: the second swap is heard
// through the target found after the first.
func TestWatchConfigMapSwap(t *testing.T) {
	_, _, srv := startGateway(t, nil, Options{Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	upstream := srv.cfg.Load().Upstream
	dir := t.TempDir()
	previous := ""
	version := func(name, doc string) {
		os.Mkdir(filepath.Join(dir, name), 0o700)
		os.WriteFile(filepath.Join(dir, name, "config.yaml"), []byte(doc), 0o600)
		os.Symlink(name, filepath.Join(dir, "..data_tmp"))
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
		if previous != "" {
			os.RemoveAll(filepath.Join(dir, previous))
		}
		previous = name
	}
	doc := demoWithUpstream(upstream)
	version("..2026_11_30_01", doc)
	path := filepath.Join(dir, "config.yaml")
	if err := os.Symlink("..data/config.yaml", path); err != nil {
		t.Fatal(err)
	}
	outcomes := watched(t, srv, path, WatchOptions{})
	for i, burst := range []string{"40", "45"} {
		version(fmt.Sprintf("..2026_11_30_%02d", i+2), strings.Replace(doc, "burst: 25\n", "burst: "+burst+"\n", 1))
		if err := nextOutcome(t, outcomes); err != nil {
			t.Fatal(err)
		}
		if st, _ := srv.Gate().TenantState("initech"); fmt.Sprint(st.Burst) != burst {
			t.Fatalf("after ConfigMap swap %d: burst %v, want %s", i+1, st.Burst, burst)
		}
	}
}

// TestWatchConfigBusySibling: a file beside the config written far more
// often than the settle time (a database, a log) does not hold an edit of
// the config back. Before events were filtered, each of its writes
// restarted the settle timer, and the edit was never read.
func TestWatchConfigBusySibling(t *testing.T) {
	_, _, srv := startGateway(t, nil, Options{})
	dir := t.TempDir()
	path := filepath.Join(dir, "fairgate.yaml")
	doc := demoWithUpstream(srv.cfg.Load().Upstream)
	writeAtomically(t, path, doc)
	keepWriting(t, filepath.Join(dir, "fairgate.db"), 10*time.Millisecond)
	outcomes := watched(t, srv, path, WatchOptions{Settle: 100 * time.Millisecond})
	writeAtomically(t, path, strings.Replace(doc, "burst: 25\n", "burst: 50\n", 1))
	if err := nextOutcome(t, outcomes); err != nil {
		t.Fatal(err)
	}
	if st, _ := srv.Gate().TenantState("initech"); st.Burst != 50 {
		t.Fatalf("after the edit: burst %v, want 50", st.Burst)
	}
}

// TestWatchConfigLogInFolder: the server's log, at debug level and written
// into the config's folder, does not feed the watcher. Before events were
// filtered, each "config folder event" line was itself a folder event,
// logged again: the log grew without bound and never let a reload settle.
func TestWatchConfigLogInFolder(t *testing.T) {
	dir := t.TempDir()
	logFile, err := os.OpenFile(filepath.Join(dir, "fairgate.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logFile.Close() }) // after the server and the watcher, registered later, stop
	log := slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, _, srv := startGateway(t, nil, Options{Logger: log})
	path := filepath.Join(dir, "fairgate.yaml")
	doc := demoWithUpstream(srv.cfg.Load().Upstream)
	writeAtomically(t, path, doc)
	outcomes := watched(t, srv, path, WatchOptions{})
	size := func() int64 {
		t.Helper()
		st, err := logFile.Stat()
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	before := size()
	log.Info("a line after the watch began") // the first write the watcher hears
	// Nothing else happens for a second: no reload is due, and the log
	// grows by that one line. The wait can only let a feedback loop show;
	// it cannot fail a watcher that has none.
	select {
	case err := <-outcomes:
		t.Fatalf("a reload with the config unchanged: %v", err)
	case <-time.After(time.Second):
	}
	if grown := size() - before; grown > 16<<10 {
		t.Fatalf("the log grew %d bytes in 1s with nothing to report: the watcher logs its own log's writes", grown)
	}
	// The watcher is not deaf: an edit is reloaded, and its events logged.
	writeAtomically(t, path, strings.Replace(doc, "burst: 25\n", "burst: 50\n", 1))
	if err := nextOutcome(t, outcomes); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(logFile.Name())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`msg="config folder event"`, `msg="config reloaded"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the log has no %s:\n%s", want, b)
		}
	}
}

// TestWatchConfigSymlinkElsewhere: a config that is a symlink to a file in
// another folder reloads when that file is edited there, and follows the
// link when it is pointed at a third folder.
func TestWatchConfigSymlinkElsewhere(t *testing.T) {
	_, _, srv := startGateway(t, nil, Options{})
	doc := demoWithUpstream(srv.cfg.Load().Upstream)
	withBurst := func(b string) string { return strings.Replace(doc, "burst: 25\n", "burst: "+b+"\n", 1) }
	first := filepath.Join(t.TempDir(), "fairgate.yaml")
	second := filepath.Join(t.TempDir(), "fairgate.yaml")
	writeAtomically(t, first, doc)
	writeAtomically(t, second, withBurst("45"))
	dir := t.TempDir()
	path := filepath.Join(dir, "fairgate.yaml")
	if err := os.Symlink(first, path); err != nil {
		t.Fatal(err)
	}
	outcomes := watched(t, srv, path, WatchOptions{})
	for _, step := range []struct {
		name  string
		edit  func()
		burst float64
	}{
		{"the target edited", func() { writeAtomically(t, first, withBurst("40")) }, 40},
		{"the link repointed", func() {
			os.Symlink(second, filepath.Join(dir, ".fairgate.yaml.new"))
			if err := os.Rename(filepath.Join(dir, ".fairgate.yaml.new"), path); err != nil {
				t.Fatal(err)
			}
		}, 45},
		{"the new target edited", func() { writeAtomically(t, second, withBurst("50")) }, 50},
	} {
		step.edit()
		if err := nextOutcome(t, outcomes); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if st, _ := srv.Gate().TenantState("initech"); st.Burst != step.burst {
			t.Fatalf("%s: burst %v, want %v", step.name, st.Burst, step.burst)
		}
	}
}

// TestWatchRLSBusySibling: the rate limit service's rule folder with a
// busy file in it that is no rule file (its log): a rule edit still
// settles and reloads.
func TestWatchRLSBusySibling(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "d.yaml")
	writeAtomically(t, path, rlsRule("1"))
	keepWriting(t, filepath.Join(dir, "rls.log"), 10*time.Millisecond)
	r := newRLSOnly(t, ParseRLS, []byte("rls:\n  configs: ["+dir+"]\n"))
	outcomes := make(chan error, 16)
	run, err := WatchRLS(r.Server(), nil, WatchOptions{Settle: 100 * time.Millisecond, OnReload: func(err error) { outcomes <- err }})
	if err != nil {
		t.Fatal(err)
	}
	running(t, run)
	writeAtomically(t, path, strings.Replace(rlsRule("1"), "domain: d\n", "domain: e\n", 1))
	if err := nextOutcome(t, outcomes); err != nil {
		t.Fatal(err)
	}
	if got := r.Server().Service().Rules().Domains(); !slices.Equal(got, []string{"e"}) {
		t.Fatalf("domains after the edit: %v, want [e]", got)
	}
}

// TestRLSRelevantReadsAsLoadRules: the watcher heeds, in a rule folder,
// exactly the files rls.LoadRules reads (a file it reads with garbage in
// it is named in its error), so the rule copied into rlsRelevant cannot
// drift from the loader's.
func TestRLSRelevantReadsAsLoadRules(t *testing.T) {
	dir := t.TempDir()
	names := []string{"a.yaml", "b.yml", ".hidden.yaml", "c.txt", "d.yaml~", "e.YAML", "f.yaml.swp", "rls.log"}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("{"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	_, err := rls.LoadRules([]string{dir})
	if a := filepath.Join(dir, "a.yaml"); err == nil || !strings.Contains(err.Error(), a+":") {
		t.Fatalf("LoadRules did not name %s in its error: %v", a, err) // the control: a read file shows
	}
	for _, n := range names {
		name := filepath.Join(dir, n)
		read := strings.Contains(err.Error(), name+":")
		if got := rlsRelevant(name, nil, map[string]bool{dir: true}); got != read {
			t.Errorf("%s: heeded %v, read by LoadRules %v", n, got, read)
		}
	}
}

func TestWatchConfigSignal(t *testing.T) {
	_, _, srv := startGateway(t, nil, Options{})
	dir := t.TempDir()
	path := filepath.Join(dir, "fairgate.yaml")
	writeAtomically(t, path, demoWithUpstream(srv.cfg.Load().Upstream))
	hup := make(chan os.Signal, 1)
	outcomes := watched(t, srv, path, WatchOptions{Reload: hup})
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
