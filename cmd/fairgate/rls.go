package main

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fairgate/fairgate/admission/gateway"
	"github.com/fairgate/fairgate/admission/rls"
)

// rlsCmd is `fairgate rls`: Envoy's rate limit service alone, with the
// admin listener (health, readiness, metrics).
func rlsCmd(ctx context.Context, args []string, stderr io.Writer) error {
	_, log, cfg, err := loadConfig(flag.NewFlagSet("rls", flag.ContinueOnError), args, stderr, gateway.LoadRLS)
	if err != nil {
		return err
	}
	tp, _, stopTracing, err := startTracing(ctx, log, cfg.Tracing, gateway.NewTraceRing(0), serverOptions{})
	if err != nil {
		return err
	}
	defer stopTracing()
	r, err := gateway.NewRLSOnly(cfg, gateway.Options{Logger: log, TracerProvider: tp})
	if err != nil {
		return err
	}
	defer r.Close()
	applyGC(log, cfg.Server)
	aln, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		return err
	}
	if err := r.CheckAdminListener(aln.Addr()); err != nil {
		aln.Close()
		return err
	}
	admin := &http.Server{Handler: r.AdminHandler(), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 60 * time.Second}
	go admin.Serve(aln)
	defer admin.Close()
	log.Info("fairgate admin listening", "admin", aln.Addr().String())
	wait, err := startRLS(ctx, log, r.Server())
	if err != nil {
		return err
	}
	return wait()
}

// startRLS serves srv on its configured address until ctx is done, and
// reloads its rule files when they change or on SIGHUP. wait blocks until
// the server has stopped gracefully and returns its error.
func startRLS(ctx context.Context, log *slog.Logger, srv *rls.Server) (wait func() error, err error) {
	ln, err := net.Listen("tcp", srv.Addr())
	if err != nil {
		return nil, err
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	watch, err := gateway.WatchRLS(srv, log, gateway.WatchOptions{Reload: hup})
	if err != nil {
		signal.Stop(hup)
		ln.Close()
		return nil, err
	}
	go watch(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	log.Info("fairgate rls listening", "addr", ln.Addr().String(), "domains", srv.Service().Rules().Domains())
	return func() error {
		defer signal.Stop(hup)
		return <-done
	}, nil
}
