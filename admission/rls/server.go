package rls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
)

// ServiceName is the gRPC service Envoy calls; the health service reports
// it (and "") as SERVING while the server runs.
const ServiceName = "envoy.service.ratelimit.v3.RateLimitService"

// Server is the rate limit service on a gRPC server: the Service, the
// standard health service, and reflection when configured.
type Server struct {
	svc    *Service
	cfg    Config // with defaults
	grpc   *grpc.Server
	health *health.Server
	log    *slog.Logger
}

// New loads cfg's rule files (and its TLS files) and builds the Server. A
// bad file fails here, naming the file and the field, before anything
// listens.
func New(cfg Config, o Options) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	rules, err := cfg.LoadRules() // with its settings (merge_domain_config)
	if err != nil {
		return nil, err
	}
	creds, err := serverCredentials(cfg.TLS, o.Logger)
	if err != nil {
		return nil, err
	}
	svc, err := NewService(cfg, rules, o)
	if err != nil {
		return nil, err
	}
	var opts []grpc.ServerOption
	if creds != nil {
		opts = append(opts, grpc.Creds(creds))
	}
	return newServer(cfg, svc, o.Logger, opts...), nil
}

// newServer puts svc on a gRPC server bounded by cfg.Limits, with opts
// (its credentials); cfg has its defaults.
func newServer(cfg Config, svc *Service, log *slog.Logger, opts ...grpc.ServerOption) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts = append(cfg.Limits.serverOptions(), opts...)
	s := &Server{svc: svc, cfg: cfg, grpc: grpc.NewServer(opts...), health: health.NewServer(), log: log}
	rlsv3.RegisterRateLimitServiceServer(s.grpc, svc)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	if cfg.Reflection {
		reflection.Register(s.grpc)
	}
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.health.SetServingStatus(ServiceName, healthpb.HealthCheckResponse_SERVING)
	return s
}

// Service returns the rate limit service.
func (s *Server) Service() *Service { return s.svc }

// Configs returns the configured rule files and folders.
func (s *Server) Configs() []string { return s.cfg.Configs }

// Addr returns the configured listen address.
func (s *Server) Addr() string { return s.cfg.Listen }

// Reload rereads the rule files and puts them in force; on error the old
// rules stay and the error names the file and the field.
func (s *Server) Reload() error {
	rules, err := s.cfg.LoadRules()
	if err != nil {
		return err
	}
	s.svc.SetRules(rules)
	s.log.Info("rls configs reloaded", "domains", len(rules.domains))
	return nil
}

// Serve serves on ln until ctx is done, then stops gracefully: health
// turns NOT_SERVING, new calls are refused, and calls in flight get up to
// the configured drain to finish before the server stops hard.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- s.grpc.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("rls: serve: %w", err)
	case <-ctx.Done():
	}
	s.health.Shutdown()
	done := make(chan struct{})
	go func() {
		s.grpc.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(s.cfg.Drain)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.log.Warn("rls: drain timed out; stopping", "drain", s.cfg.Drain.String())
		s.grpc.Stop()
		<-done
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("rls: serve: %w", err)
	}
	return nil
}
