package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/admission/rls"
)

// LoadRLS reads a config file for `fairgate rls`, the Envoy rate limit
// service alone: the file needs an rls section; redis, tracing and
// admin_listen are read as for serve; upstream, tiers, tenants and routes
// are not required (and not used). Every error starts with the path.
func LoadRLS(path string) (Config, error) { return load(path, ParseRLS) }

// ParseRLS is Parse for `fairgate rls`; see LoadRLS.
func ParseRLS(data []byte) (Config, error) { return parseWith(data, (*Config).ValidateRLS) }

// ValidateRLS checks what the rate limit service alone uses: the rls
// section (required), redis, tracing, and admin against admin_listen.
// Errors name the field.
func (c *Config) ValidateRLS() error {
	errs := append(c.validateSections(), c.validateAdmin()...)
	if c.RLS == nil {
		errs = append(errs, errors.New("rls: required (listen, configs) to run the rate limit service"))
	}
	return errors.Join(errs...)
}

// RLS builds the Envoy rate limit service of the config's rls section on
// the gateway's store (so its decisions share the Redis store's denial
// cache, failure policy and breaker) and metrics registry; tp makes its
// admission.rls spans (nil: none). It returns nil, nil when the config
// has no rls section. The caller serves it and stops it.
func (s *Server) RLS(tp trace.TracerProvider) (*rls.Server, error) {
	cfg := s.cfg.Load()
	if cfg.RLS == nil {
		return nil, nil
	}
	return newRLS(*cfg.RLS, s.store, s.tel, tp, s.log)
}

func newRLS(cfg rls.Config, store ratelimit.Store, tel *telemetry, tp trace.TracerProvider, log *slog.Logger) (*rls.Server, error) {
	rt, err := rls.NewTelemetry(rls.TelemetryOptions{TracerProvider: tp, Metrics: tel.reg, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("gateway: rls metrics: %w", err)
	}
	return rls.New(cfg, rls.Options{Store: store, Logger: log, Telemetry: rt})
}

// RLSOnly is `fairgate rls`: the Envoy rate limit service without the
// HTTP gateway, and an admin handler (health, readiness, metrics).
type RLSOnly struct {
	srv     *rls.Server
	admin   *adminAccess
	closers []func() error
}

// NewRLSOnly builds the rate limit service of a config checked by
// ValidateRLS: its store (Redis when configured, else embedded), metrics
// and rule files. Nothing listens yet.
func NewRLSOnly(cfg Config, o Options) (*RLSOnly, error) {
	if err := cfg.ValidateRLS(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	access, err := newAdminPolicy(cfg.Admin, cfg.AdminListen) // reads admin.token_file
	if err != nil {
		return nil, err
	}
	tel, closers, err := prepare(cfg, &o)
	if err != nil {
		return nil, err
	}
	r := &RLSOnly{closers: closers}
	r.srv, err = newRLS(*cfg.RLS, o.Store, tel, o.TracerProvider, o.Logger)
	if err != nil {
		r.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ready\n")) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(tel.reg, promhttp.HandlerOpts{}))
	r.admin = newAdminAccess(cfg.AdminListen, access, mux, o.Now)
	return r, nil
}

// Server returns the rate limit service.
func (r *RLSOnly) Server() *rls.Server { return r.srv }

// CheckAdminListener refuses ln's address for the admin listener when it
// is not loopback and no admin token is set (a loopback admin_listen name
// that resolved elsewhere), as Server.Serve does.
func (r *RLSOnly) CheckAdminListener(addr net.Addr) error { return r.admin.checkListener(addr) }

// AdminHandler returns the admin listener's handler, behind the same Host
// and token checks as Server's (AdminConfig). The config is not reloaded:
// a new admin token needs a restart.
func (r *RLSOnly) AdminHandler() http.Handler { return r.admin }

// Close releases the store (the Redis client). Call it after Serve has
// returned.
func (r *RLSOnly) Close() error {
	var errs []error
	for _, c := range r.closers {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

// WatchRLS reloads srv's rule files when they change, and when o.Reload
// fires. It watches each configured folder (and the folder of each
// configured file), so it sees files written in place, renamed over and
// Kubernetes ConfigMap symlink swaps; events within o.Settle are read
// once. Only events that can change the rules are heeded (rlsRelevant):
// a log or a database in a watched folder would otherwise reload the
// rules on each of its writes, and keep an edit from settling. A bad file
// keeps the old rules; the error, naming the file and the field, is
// logged and passed to o.OnReload.
//
// The watch is in place when WatchRLS returns; run reloads until ctx is
// done.
func WatchRLS(srv *rls.Server, log *slog.Logger, o WatchOptions) (run func(ctx context.Context) error, err error) {
	if o.Settle <= 0 {
		o.Settle = 100 * time.Millisecond
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("gateway: watch rls configs: %w", err)
	}
	files, dirs := make(map[string]bool), make(map[string]bool)
	for _, p := range srv.Configs() {
		abs, err := filepath.Abs(p)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("gateway: watch %s: %w", p, err)
		}
		dir := abs
		if st, err := os.Stat(abs); err == nil && !st.IsDir() {
			dir = filepath.Dir(abs)
			files[abs] = true
		} else {
			dirs[abs] = true
		}
		if err := w.Add(dir); err != nil {
			w.Close()
			return nil, fmt.Errorf("gateway: watch %s: %w", p, err)
		}
	}
	reload := func() {
		err := srv.Reload()
		if err != nil {
			log.Error("rls config reload failed; keeping the old rules", "err", err.Error())
		}
		if o.OnReload != nil {
			o.OnReload(err)
		}
	}
	relevant := func(name string) bool { return rlsRelevant(filepath.Clean(name), files, dirs) }
	return func(ctx context.Context) error {
		return runWatch(ctx, w, o, log, relevant, func(bool) { reload() })
	}, nil
}

// rlsRelevant reports whether an event on name (absolute, clean) can
// change the rules of the configured files and folders: a configured file
// (through a ConfigMap, a link to ..data/<file>), a file rls.LoadRules
// reads in a configured folder (*.yaml and *.yml, not dotfiles; the test
// checks that the two agree), or a ConfigMap swap.
func rlsRelevant(name string, files, dirs map[string]bool) bool {
	base := filepath.Base(name)
	if files[name] || base == configMapSwap {
		return true
	}
	return dirs[filepath.Dir(name)] && !strings.HasPrefix(base, ".") &&
		(strings.HasSuffix(base, ".yaml") || strings.HasSuffix(base, ".yml"))
}
