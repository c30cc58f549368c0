package rls_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"gopkg.in/yaml.v3"

	"github.com/fairgate/fairgate/admission/redisstore"
	"github.com/fairgate/fairgate/admission/rls"
	"github.com/fairgate/fairgate/internal/redistest"
)

// TestERLDiff is a differential test against envoyproxy/ratelimit (ERL),
// run by `ERL_BIN=PATH make erl-diff` (CI has no ERL, so it is not part
// of `make test`; without ERL_BIN it skips):
//
//   - ERL_BIN is ERL's service_cmd (`go build ./src/service_cmd` in its
//     source tree).
//   - ERL_SRC is ERL's source tree, for its configs; by default the tree
//     ERL_BIN was built from (the binary records it), else the one it
//     sits in (see findERLSource); the test fails when there is none.
//   - ERL_DIFF_OUT is where the full report goes (every differing call,
//     both answers, each field's class); by default a file in the test's
//     temporary folder, removed when the test ends.
//   - ERL_DIFF_WINDOW is "bucket" or "fixed" to run one pass only (below);
//     by default both run.
//
// Configs are ERL's own: every *.yaml of its integration-test runtime and
// of examples/ratelimit/config, and every ```yaml block of its README
// that is a rate limit config, read at test time (nothing of ERL is
// copied here). The comparison runs twice, each pass reported apart:
// fairgate with rls.window unset (token buckets), then with rls.window:
// fixed (ERL's windows). In each pass each config runs three times —
// ERL's and fairgate's defaults; response headers on in both
// (LIMIT_RESPONSE_HEADERS_ENABLED, rls.response_headers); global shadow
// mode (SHADOW_MODE, rls.shadow) — with ERL started on the config in a
// runtime folder and fairgate's Service on the same folder, both on one
// redis-server (ERL in db 0 under CACHE_KEY_PREFIX erldiff_, fairgate in
// db 1, its Redis store failing closed, so that no decision is a silent
// local one). The sequences (see sequences) each start from an empty
// Redis and a new fairgate store, and run back to back; one that involves
// a per-second limit starts early in a second.
//
// Each call's answers are compared field by field: the overall code, each
// descriptor's code, current_limit (requests_per_unit, unit, name) and
// limit_remaining, and response_headers_to_add; in the fixed pass
// duration_until_reset too, in whole seconds rounded up as ERL counts it
// (a token bucket means another thing by it). So that both services count
// a call in one window, the fixed pass makes no call within
// erlWindowMargin of a whole second, where every window ends.
// A field that differs is documented when the model (erldiff_model_test.go)
// predicts fairgate's value from ERL's semantics and the differences
// docs/envoy.md states (erlDocumented); the test fails while any
// undocumented difference is left, listing each with its call.
func TestERLDiff(t *testing.T) {
	bin := os.Getenv("ERL_BIN")
	if bin == "" {
		t.Skip("ERL_BIN is not set: the differential test against envoyproxy/ratelimit runs with `ERL_BIN=PATH make erl-diff`")
	}
	if err := checkERLBin(bin); err != nil {
		t.Fatal(err)
	}
	src := os.Getenv("ERL_SRC")
	if src == "" {
		var err error
		if src, err = findERLSource(bin); err != nil {
			t.Fatal(err)
		}
	}
	cfgs, skipped, err := erlConfigs(src)
	if err != nil {
		t.Fatal(err)
	}
	docs, gone, err := documentedNow(filepath.Join("..", "..", "docs", "envoy.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := os.Getenv("ERL_DIFF_OUT")
	if out == "" {
		out = filepath.Join(t.TempDir(), "erl-diff.txt")
	}
	redis := redistest.StartServer(t)

	var full strings.Builder
	for _, pass := range erlPasses {
		if w := os.Getenv("ERL_DIFF_WINDOW"); w != "" && w != pass.name {
			continue
		}
		rep := newReport()
		rep.notes = append(rep.notes, "ERL_SRC "+src)
		for _, s := range skipped {
			rep.notes = append(rep.notes, "not a config: "+s)
		}
		rep.notes = append(rep.notes, gone...)
		for _, cfg := range cfgs {
			runs := []erlConfig{cfg}
			for _, mode := range erlModes {
				for i := 0; i < len(runs); i++ {
					derived := runConfig(t, bin, redis.Addr(), runs[i], pass, mode, docs, rep)
					if derived != nil && mode.name == erlModes[0].name {
						runs = append(runs, *derived)
					}
				}
			}
		}
		rep.modelNotes()
		title := fmt.Sprintf("pass %q: fairgate with %s\n", pass.name, pass.what)
		t.Log("\n" + title + rep.table())
		full.WriteString(title + rep.full() + "\n")
		if u := rep.undocumentedLines(); len(u) > 0 {
			t.Errorf("pass %q: %d calls differ from envoyproxy/ratelimit in a way docs/envoy.md does not state:\n%s", pass.name, len(u), strings.Join(u, "\n"))
		}
	}
	if err := os.WriteFile(out, []byte(full.String()), 0o644); err != nil {
		t.Error(err)
	}
	t.Logf("full report: %s", out)
}

// modelNotes notes the fields where the model was wrong.
func (r *report) modelNotes() {
	models := 0
	for _, c := range r.calls {
		for _, d := range c.diffs {
			if strings.Contains(d.note, "ERL applied a limit") {
				models++
			}
		}
	}
	if models > 0 {
		r.notes = append(r.notes, fmt.Sprintf("%d fields where ERL applied a limit the test's model did not expect: the model needs a fix", models))
	}
	if r.modelMisses > 0 {
		r.notes = append(r.notes, fmt.Sprintf("%d fields where ERL and fairgate agree and the model predicted otherwise (it follows fairgate's figures from there)", r.modelMisses))
	}
}

// erlPass is how fairgate counts in one pass of the comparison.
type erlPass struct {
	name, what string
	window     rls.Window
}

var erlPasses = []erlPass{
	{name: "bucket", what: "rls.window unset (token buckets)"},
	{name: "fixed", what: "rls.window: fixed (ERL's windows)", window: rls.WindowFixed},
}

// erlWindowMargin is how close to a whole second the fixed pass makes no
// call: ERL's and fairgate's answers to one call, a few milliseconds
// apart, then fall in one second, hence in one window of every unit.
const erlWindowMargin = 50 * time.Millisecond

// erlMode is one way both services run a config.
type erlMode struct {
	name             string
	headers, shadow  bool
	malformedToo     bool
	fairgateHeaders  bool
	fairgateShadowed bool
}

var erlModes = []erlMode{
	{name: "default", malformedToo: true},
	{name: "headers", headers: true, fairgateHeaders: true},
	{name: "shadow", shadow: true, fairgateShadowed: true},
}

// unknownField finds the fields fairgate refuses in its load error.
var unknownField = regexp.MustCompile(`unknown field "([a-z_]+)"`)

// runConfig runs cfg's sequences on both services in mode, adding each
// call to rep. When fairgate refuses a config ERL loads only for fields it
// does not know, it returns the config without them, so that the rest of
// it is compared too.
func runConfig(t *testing.T, bin, redisAddr string, cfg erlConfig, pass erlPass, mode erlMode, docs map[string]bool, rep *report) *erlConfig {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "runtime", "current")
	cdir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(cdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cdir, "config.yaml"), cfg.data, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := redistest.Do(redisAddr, "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	erl, err := startERL(bin, dir, erlSettings{runtimeRoot: root, redisAddr: redisAddr, headers: mode.headers, shadow: mode.shadow})
	if err != nil {
		t.Fatalf("%s: %v", cfg.name, err)
	}
	defer erl.stop()
	rules, fgErr := rls.LoadRules([]string{cdir})

	// The config load is one comparison.
	load := &callResult{config: cfg.name, mode: mode.name, seq: "load", req: "(the config)", erl: "loads", fg: "loads"}
	if erl.loadErr != "" {
		load.erl = "refuses: " + erl.loadErr
	}
	if fgErr != nil {
		load.fg = "refuses: " + strings.ReplaceAll(fgErr.Error(), "\n", "; ")
	}
	if (erl.loadErr == "") != (fgErr == nil) {
		load.diffs = []diff{{field: "config", erl: load.erl, fg: load.fg, note: "one service refuses the config"}}
	}
	rep.add(load)
	switch {
	case erl.loadErr != "" && fgErr != nil:
		rep.row(cfg.name).note = "both refuse it"
	case erl.loadErr != "":
		rep.row(cfg.name).note = "ERL refuses it"
	case fgErr != nil:
		rep.row(cfg.name).note = "fairgate refuses it"
	}
	if erl.loadErr != "" || fgErr != nil {
		if erl.loadErr == "" && mode.name == erlModes[0].name {
			return withoutFields(cfg, fgErr)
		}
		return nil
	}

	fg := startFairgate(t, rls.Config{Configs: []string{cdir}, Shadow: mode.fairgateShadowed, ResponseHeaders: mode.fairgateHeaders, Window: pass.window}, rules)
	defer fg.stop()
	for _, seq := range sequences(cfg.file, mode.malformedToo) {
		if mode.name == erlModes[0].name {
			rep.seqs[cfg.name] = append(rep.seqs[cfg.name], fmt.Sprintf("%s (%d calls)", seq.name, len(seq.calls)))
		}
		runSequence(t, erl, fg, redisAddr, cfg, pass, mode, seq, docs, rep)
	}
	return nil
}

// withoutFields is cfg less the fields fairgate's load error calls
// unknown, or nil when the error is not only that.
func withoutFields(cfg erlConfig, err error) *erlConfig {
	var names []string
	for _, line := range strings.Split(err.Error(), "\n") {
		m := unknownField.FindStringSubmatch(line)
		if m == nil {
			return nil
		}
		if !slices.Contains(names, m[1]) {
			names = append(names, m[1])
		}
	}
	var root yaml.Node
	if yaml.Unmarshal(cfg.data, &root) != nil {
		return nil
	}
	var strip func(n *yaml.Node)
	strip = func(n *yaml.Node) {
		if n.Kind == yaml.MappingNode {
			var keep []*yaml.Node
			for i := 0; i+1 < len(n.Content); i += 2 {
				if !slices.Contains(names, n.Content[i].Value) {
					keep = append(keep, n.Content[i], n.Content[i+1])
				}
			}
			n.Content = keep
		}
		for _, c := range n.Content {
			strip(c)
		}
	}
	strip(&root)
	data, err := yaml.Marshal(&root)
	if err != nil {
		return nil
	}
	f, _ := parseERLFile(data)
	if f == nil {
		return nil
	}
	return &erlConfig{name: cfg.name + " without " + strings.Join(names, ", "), data: data, file: f}
}

// runSequence runs seq on fresh state and adds each call to rep.
func runSequence(t *testing.T, erl *erlProc, fg *fairgateRLS, redisAddr string, cfg erlConfig, pass erlPass, mode erlMode, seq erlSeq, docs map[string]bool, rep *report) {
	t.Helper()
	if _, err := redistest.Do(redisAddr, "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	store := fg.newStore(t, redisAddr)
	defer store.Close()
	m := newModel(cfg.file, mode.shadow, mode.headers, docs)
	m.fixed = pass.window == rls.WindowFixed
	if perSecond(m, seq) {
		// Start early in a second, so that ERL's one-second windows turn
		// over as rarely as they can within the sequence.
		if left := time.Second - time.Duration(time.Now().Nanosecond()); left < 400*time.Millisecond {
			time.Sleep(left + 5*time.Millisecond)
		}
	}
	for i, req := range seq.calls {
		if slices.Contains(seq.turns, i) {
			// Just past the next whole second, where every window of a
			// second ends.
			time.Sleep(time.Second - time.Duration(time.Now().Nanosecond()) + 5*time.Millisecond)
		}
		if m.fixed {
			if left := time.Second - time.Duration(time.Now().Nanosecond()); left < erlWindowMargin {
				time.Sleep(left + time.Millisecond)
			}
		}
		erlStart := time.Now()
		eresp, eerr := erl.ShouldRateLimit(req)
		start := time.Now()
		fresp, ferr := fg.call(req)
		end := time.Now()
		if ferr != nil && errors.Is(ferr, context.DeadlineExceeded) {
			t.Fatalf("fairgate: %v", ferr)
		}
		e, f := answerFields(eresp, eerr), answerFields(fresp, ferr)
		if m.fixed {
			e, f = withResets(e, eresp), withResets(f, fresp)
			if erlStart.Unix() != end.Unix() {
				rep.notes = append(rep.notes, fmt.Sprintf("%s [%s] %s #%d: called across a second's end (%v)", cfg.name, mode.name, seq.name, i+1, end.Sub(erlStart)))
			}
		}
		c := &callResult{config: cfg.name, mode: mode.name, seq: seq.name, index: i, req: requestString(req), erl: render(e), fg: render(f)}
		c.diffs = m.classify(req, e, f, start, end)
		c.misses = slices.Clone(m.misses)
		rep.add(c)
	}
}

// perSecond says whether any call of seq meets a per-second limit.
func perSecond(m *model, seq erlSeq) bool {
	for _, req := range seq.calls {
		for _, d := range m.describe(req) {
			if d.limit != nil && d.limit.unit == rlsv3.RateLimitResponse_RateLimit_SECOND {
				return true
			}
		}
	}
	return false
}

// fairgateRLS is fairgate's rate limit service on a loopback gRPC port,
// its Service swapped for each sequence (a new store, so that nothing a
// store remembers, such as a denial, outlives the sequence).
type fairgateRLS struct {
	cfg   rls.Config
	rules *rls.Rules
	svc   swapService
	srv   *grpc.Server
	conn  *grpc.ClientConn
	cl    rlsv3.RateLimitServiceClient
	done  chan error
}

// swapService serves the Service in cur.
type swapService struct {
	rlsv3.UnimplementedRateLimitServiceServer
	cur atomic.Pointer[rls.Service]
}

func (s *swapService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return s.cur.Load().ShouldRateLimit(ctx, req)
}

func startFairgate(t *testing.T, cfg rls.Config, rules *rls.Rules) *fairgateRLS {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fairgateRLS{cfg: cfg, rules: rules, srv: grpc.NewServer(), done: make(chan error, 1)}
	rlsv3.RegisterRateLimitServiceServer(f.srv, &f.svc)
	go func() { f.done <- f.srv.Serve(ln) }()
	if f.conn, err = grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		t.Fatal(err)
	}
	f.cl = rlsv3.NewRateLimitServiceClient(f.conn)
	return f
}

// newStore puts a Service on a new Redis store (db 1 of addr) in force.
func (f *fairgateRLS) newStore(t *testing.T, addr string) *fgStore {
	t.Helper()
	cfg := redisstore.Config{Addrs: []string{addr}, DB: 1, FailurePolicy: redisstore.FailClosed, Timeout: time.Second}
	client, err := redisstore.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := redisstore.New(client, cfg, redisstore.Options{})
	if err != nil {
		client.Close()
		t.Fatal(err)
	}
	svc, err := rls.NewService(f.cfg, f.rules, rls.Options{Store: s})
	if err != nil {
		s.Close()
		client.Close()
		t.Fatal(err)
	}
	f.svc.cur.Store(svc)
	return &fgStore{s: s, close: client.Close}
}

type fgStore struct {
	s     *redisstore.Store
	close func() error
}

func (s *fgStore) Close() {
	s.s.Close()
	s.close()
}

func (f *fairgateRLS) call(req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return f.cl.ShouldRateLimit(ctx, req)
}

func (f *fairgateRLS) stop() {
	f.conn.Close()
	f.srv.Stop()
	<-f.done
}
