// Command fairgate is the admission-control and load-shedding gateway.
//
//	fairgate serve --config FILE     run the gateway (and the Envoy rate limit service, with an rls section)
//	fairgate rls --config FILE       run the Envoy rate limit service alone
//	fairgate demo                    run the gateway and a demo API, embedded store
//	fairgate demo-upstream           run only the demo API
//	fairgate check-config FILE       validate a config file
//	fairgate hash-key                read an API key on stdin, print its hash
package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
	_ "time/tzdata" // fixed windows' time zones, on a machine or image without a zone database

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairgate/fairgate/admission/gateway"
	"github.com/fairgate/fairgate/admission/redisstore"
	"github.com/fairgate/fairgate/deploy/examples"
	"github.com/fairgate/fairgate/internal/demoapi"
	"github.com/fairgate/fairgate/internal/tracelog"
	"github.com/fairgate/fairgate/tenant"
)

const usage = `fairgate: admission control and load shedding for multi-tenant HTTP APIs

Usage:
  fairgate serve --config FILE      run the gateway in front of the config's upstream
                                    (and Envoy's rate limit service when the config has an rls section)
  fairgate rls --config FILE        run only Envoy's rate limit service (gRPC); the config needs rls,
                                    and may hold only rls, redis, tracing, admin_listen, admin
  fairgate demo [--listen ADDR]     run the gateway and a built-in demo API (embedded store)
  fairgate demo-upstream [--listen ADDR]
                                    run only the demo API (for serve with the demo config)
  fairgate bench [--scenario NAME] [--modes LIST] [--duration D] [--seed N] [--redis ADDR] [--out DIR]
                                    overload benchmarks (see bench/RESULTS.md); --scenario throughput
                                    measures req/s and CPU per request of each server on one core (bench/PERF.md)
  fairgate check-config [--rls] FILE
                                    validate a config file (--rls: one for fairgate rls) and the
                                    rls section's rule files; non-zero exit on error
  fairgate hash-key                 read an API key on stdin, print the hash for the config
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch args[0] {
	case "serve":
		err = serve(ctx, args[1:], stderr)
	case "rls":
		err = rlsCmd(ctx, args[1:], stderr)
	case "demo":
		err = demo(ctx, args[1:], stdout, stderr)
	case "demo-upstream":
		err = demoUpstream(ctx, args[1:], stdout, stderr)
	case "bench":
		err = benchCmd(ctx, args[1:], stdout, stderr)
	case "bench-server":
		err = benchServer(ctx, args[1:], stdout)
	case "check-config":
		err = checkConfig(args[1:], stdout)
	case "hash-key":
		err = hashKey(stdin, stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "fairgate: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "fairgate %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	// JSON lines; a line logged with a request's context carries its
	// trace_id and span_id.
	log := slog.New(tracelog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})))
	// go-redis logs every failed dial through its own package logger; the
	// Redis store already logs Redis trouble at a bounded rate, so these
	// lines go to debug.
	redis.SetLogger(redisLogger{log})
	return log, nil
}

// redisLogger sends go-redis's internal log lines to slog at debug level.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "go-redis: "+fmt.Sprintf(format, v...))
}

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	drain := fs.Duration("drain", 20*time.Second, "how long in-flight requests may take to finish on shutdown")
	delay := fs.Duration("shutdown-delay", 5*time.Second, "on SIGTERM, how long to keep serving after /readyz turns not-ready, before draining (load balancers still route meanwhile)")
	path, log, cfg, err := loadConfig(fs, args, stderr, gateway.Load)
	if err != nil {
		return err
	}
	srv, tp, stop, err := newServer(ctx, log, cfg, serverOptions{})
	if err != nil {
		return err
	}
	defer stop()
	rlsSrv, err := srv.RLS(tp)
	if err != nil {
		return err
	}
	if rlsSrv != nil {
		// The rate limit service stops with the gateway, also when the
		// gateway fails to start.
		rctx, cancel := context.WithCancel(ctx)
		wait, err := startRLS(rctx, log, rlsSrv)
		if err != nil {
			cancel()
			return err
		}
		defer func() {
			cancel()
			if err := wait(); err != nil {
				log.Error("rls", "err", err.Error())
			}
		}()
	}
	// SIGHUP and changes to the file reload it; a bad file keeps the old
	// config and logs the field-level error.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	applyGC(log, srv.Config().Server)
	watcher, err := srv.WatchConfig(path, gateway.WatchOptions{Reload: hup, OnReload: func(err error) {
		srv.RecordReload(err)
		if err == nil {
			applyGC(log, srv.Config().Server)
		}
	}})
	if err != nil {
		return err
	}
	go watcher.Run(ctx)
	return listenAndServe(ctx, log, srv, cfg.Listen, cfg.AdminListen, gateway.Shutdown{Delay: *delay, Drain: *drain})
}

// loadConfig parses a server command's flags (fs's own, plus --config and
// --log-level), builds the logger and loads the config file with load.
func loadConfig(fs *flag.FlagSet, args []string, stderr io.Writer, load func(string) (gateway.Config, error)) (string, *slog.Logger, gateway.Config, error) {
	path := fs.String("config", "", "config file (YAML)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return "", nil, gateway.Config{}, err
	}
	if *path == "" {
		return "", nil, gateway.Config{}, errors.New("--config FILE is required")
	}
	log, err := newLogger(stderr, *level)
	if err != nil {
		return "", nil, gateway.Config{}, err
	}
	cfg, err := load(*path)
	return *path, log, cfg, err
}

// startTracing builds the tracer provider from the config's tracing section
// and the OTEL_* environment, keeping rejected traces in ring for the
// console too; nil when tracing is off, unless o.consoleTraces asks for a
// provider that only feeds ring. what says where traces go, for the
// startup log. stop flushes the spans still buffered (with its own
// deadline: ctx is done by then).
func startTracing(ctx context.Context, log *slog.Logger, cfg *gateway.TracingConfig, ring *gateway.TraceRing, o serverOptions) (tp trace.TracerProvider, what string, stop func(), err error) {
	sdk, err := gateway.NewTracerProvider(ctx, cfg, os.Getenv, ring)
	if err != nil {
		return nil, "", func() {}, err
	}
	if sdk == nil {
		if !o.consoleTraces {
			return nil, "off", func() {}, nil
		}
		sdk, what = gateway.NewConsoleTracerProvider(ring), "console only (no OTLP endpoint)"
	} else {
		what = cmp.Or(tracingEndpoint(cfg), "the OTLP endpoint")
		// The exporter's errors are log lines like every other.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			log.Warn("tracing: OTLP export", "err", err.Error())
		}))
	}
	return sdk, what, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := sdk.Shutdown(sctx); err != nil {
			log.Warn("tracing: flush on shutdown", "err", err.Error())
		}
	}, nil
}

// tracingEndpoint is where traces go: the config's endpoint, else the
// OTEL_* environment's.
func tracingEndpoint(cfg *gateway.TracingConfig) string {
	if cfg != nil && cfg.Endpoint != "" {
		return cfg.Endpoint
	}
	return cmp.Or(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"), os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
}

// serverOptions are what serve and demo set differently.
type serverOptions struct {
	// consoleTraces keeps rejected traces for the console even without an
	// OTLP endpoint (every request's spans are recorded: the demo's
	// choice, not production's).
	consoleTraces bool
}

// newServer starts tracing as cfg (or the OTEL_* environment) says and
// builds the gateway; stop closes the gateway's store and flushes spans.
// It logs what is on.
func newServer(ctx context.Context, log *slog.Logger, cfg gateway.Config, o serverOptions) (*gateway.Server, trace.TracerProvider, func(), error) {
	ring := gateway.NewTraceRing(0)
	tp, tracing, stopTracing, err := startTracing(ctx, log, cfg.Tracing, ring, o)
	if err != nil {
		return nil, nil, nil, err
	}
	opts := gateway.Options{Logger: log, TracerProvider: tp}
	if tp != nil {
		opts.Traces = ring
	}
	srv, err := gateway.New(cfg, opts)
	if err != nil {
		stopTracing()
		return nil, nil, nil, err
	}
	store := "embedded memory store"
	if cfg.Redis != nil {
		store = "redis " + strings.Join(cfg.Redis.Addrs, ",")
	}
	log.Info("fairgate configured", "store", store, "tracing", tracing,
		"tenants", len(srv.Gate().Registry().Tenants()), "jaeger_ui", cfg.Admin.JaegerUIURL)
	return srv, tp, func() {
		srv.Close()
		stopTracing()
	}, nil
}

// applyGC sets the Go collector as the config's server section says
// (gc_percent, memory_limit) and logs what is in force.
func applyGC(log *slog.Logger, cfg gateway.ServerConfig) {
	g := gateway.ApplyGC(cfg, os.Getenv)
	limit := "none"
	if g.MemoryLimit != math.MaxInt64 {
		limit = strconv.FormatInt(g.MemoryLimit, 10)
	}
	log.Info("go garbage collector", "gc_percent", g.GCPercent, "memory_limit", limit)
}

func listenAndServe(ctx context.Context, log *slog.Logger, srv *gateway.Server, addr, adminAddr string, sh gateway.Shutdown) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	aln, err := net.Listen("tcp", adminAddr)
	if err != nil {
		ln.Close()
		return err
	}
	log.Info("fairgate listening", "addr", ln.Addr().String(), "admin", aln.Addr().String(),
		"console", "http://"+aln.Addr().String()+"/")
	return srv.Serve(ctx, ln, aln, sh)
}

func demo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "gateway address")
	admin := fs.String("admin-listen", "127.0.0.1:9090", "admin address (health, metrics)")
	upAddr := fs.String("upstream-listen", "127.0.0.1:8081", "demo API address")
	level := fs.String("log-level", "warn", "debug, info, warn or error")
	redisAddr := fs.String("redis", "", "keep the buckets in the Redis at this address instead of the embedded store")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := newLogger(stderr, *level)
	if err != nil {
		return err
	}
	cfg, err := gateway.Parse(examples.Demo)
	if err != nil {
		return fmt.Errorf("deploy/examples/demo.yaml: %w", err)
	}
	store := "embedded store"
	if *redisAddr != "" {
		cfg.Redis = &redisstore.Config{Addrs: []string{*redisAddr}}
		store = "Redis at " + *redisAddr
	}
	uln, err := net.Listen("tcp", *upAddr)
	if err != nil {
		return err
	}
	up := &http.Server{Handler: demoapi.New(demoapi.Config{Connections: 16}), ReadHeaderTimeout: 5 * time.Second}
	go up.Serve(uln)
	defer up.Close()
	cfg.Upstream = "http://" + uln.Addr().String()
	cfg.Listen, cfg.AdminListen = *listen, *admin
	srv, _, stop, err := newServer(ctx, log, cfg, serverOptions{consoleTraces: true})
	if err != nil {
		return err
	}
	defer stop()
	applyGC(log, srv.Config().Server)
	fmt.Fprintf(stdout, `fairgate demo: gateway on http://%[1]s (%[4]s), admin on http://%[2]s, demo API (16 connections) on %[3]s

Demo API keys:
  acme     enterprise  demo-enterprise-key
  globex   pro         demo-pro-key
  initech  starter     demo-starter-key

Try:
  curl -i -H 'Authorization: Bearer demo-starter-key' http://%[1]s/api/v1/users/me
  for i in $(seq 8); do curl -s -o /dev/null -w '%%{http_code} Retry-After: %%header{retry-after}\n' -H 'Authorization: Bearer demo-starter-key' http://%[1]s/api/v1/search; done
  curl -i -H 'Authorization: Bearer demo-enterprise-key' http://%[1]s/api/v1/users/me
  curl -s http://%[2]s/admin/tenants/initech

Console (live tenants, pools, rejections and their traces): http://%[2]s/

Ctrl-C stops it.
`, *listen, *admin, uln.Addr(), store)
	return listenAndServe(ctx, log, srv, cfg.Listen, cfg.AdminListen, gateway.Shutdown{Drain: 5 * time.Second})
}

func demoUpstream(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo-upstream", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8081", "address")
	conns := fs.Int("connections", 16, "simulated database connections")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: demoapi.New(demoapi.Config{Connections: *conns}), ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintf(stdout, "demo API (%d connections) on http://%s\n", *conns, ln.Addr())
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func hashKey(stdin io.Reader, stdout io.Writer) error {
	line, err := bufio.NewReader(io.LimitReader(stdin, tenant.MaxKeyLen+2)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	key := strings.TrimRight(line, "\r\n")
	if key == "" {
		return errors.New("no key on stdin (try: printf %s KEY | fairgate hash-key)")
	}
	fmt.Fprintln(stdout, tenant.HashKey(key))
	return nil
}
