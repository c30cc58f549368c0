package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminMux is the admin listener's mux: health, readiness, metrics, and
// the console with its JSON API (console.go). New puts adminAccess in
// front of it.
func (s *Server) adminMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "not ready\n", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.tel.reg, promhttp.HandlerOpts{}))
	s.consoleRoutes(mux)
	return mux
}

// SetReady sets what /readyz answers; shutdown clears it first.
func (s *Server) SetReady(ok bool) { s.ready.Store(ok) }

// HTTPServers returns the public and admin http.Servers, configured with
// the edge's timeouts, limits and protocols, for the caller to serve on its
// listeners. server.tls and server.proxy_protocol are the listener's
// (Serve wraps it); a caller serving the public server itself serves
// neither.
func (s *Server) HTTPServers() (public, admin *http.Server) {
	c := s.cfg.Load().Server
	public = &http.Server{
		Handler:           s.edge,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    c.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ConnContext:       withConnDeadline,
		Protocols:         protocols(c),
	}
	admin = &http.Server{Handler: s.admin, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 60 * time.Second}
	return public, admin
}

// Shutdown is how Serve stops once its context is done.
type Shutdown struct {
	// Delay is how long the gateway keeps accepting and serving new
	// requests after /readyz has turned not-ready, so that a load balancer
	// that still routes to it (it polls readiness, and endpoint changes
	// take time to spread) finds it listening. Zero means no delay.
	Delay time.Duration
	// Drain is how long requests in flight may take to finish once the
	// listener has closed; queued requests get 503 draining at once.
	Drain time.Duration
}

// Serve serves the gateway on ln and the admin handler on adminLn until ctx
// is done, then shuts down: /readyz fails first; new requests are still
// served for sh.Delay; then the listener closes, queued requests get 503
// and those in flight get up to sh.Drain to finish. An adminLn beyond
// loopback is refused while admin_listen says loopback and no admin.token
// is set: nothing would guard it.
func (s *Server) Serve(ctx context.Context, ln, adminLn net.Listener, sh Shutdown) error {
	if err := s.admin.checkListener(adminLn.Addr()); err != nil {
		return err
	}
	pub, adm := s.HTTPServers()
	c := s.cfg.Load().Server
	tc, err := tlsConfig(c, s.log)
	if err != nil {
		return err
	}
	pub.TLSConfig = tc
	// The public listener's stack: net/http's server, or fasthttp's
	// (server.engine) with HTTP/2 handed to net/http's (handoff), closed
	// and shut down the same way.
	closePub, shutdownPub := pub.Close, pub.Shutdown
	serve := func() error { return pub.Serve(wrapListener(ln, c, tc, s.trusted)) }
	if c.Engine == EngineFast {
		edge, err := newFastEdge(s, *s.cfg.Load())
		if err != nil {
			return err
		}
		defer edge.close()
		fs := edge.server()
		ho := newHandoff(wrapListener(ln, c, nil, s.trusted), tc, c.H2C == nil || *c.H2C, c.ReadHeaderTimeout)
		closePub = func() error {
			ho.stop()
			return errors.Join(fs.Shutdown(), pub.Close())
		}
		shutdownPub = func(ctx context.Context) error {
			ho.stop()
			err := fs.ShutdownWithContext(ctx)
			if err2 := pub.Shutdown(ctx); !errors.Is(err2, http.ErrServerClosed) {
				err = errors.Join(err, err2)
			}
			return err
		}
		serve = func() error {
			go pub.Serve(ho.http2) // ends with the handoff; its shutdown is shutdownPub's
			return fs.Serve(edgeListener{ho.http1, edge.watcher})
		}
	}
	errc := make(chan error, 2)
	go func() { errc <- serve() }()
	go func() { errc <- adm.Serve(adminLn) }()
	select {
	case err := <-errc:
		closePub()
		adm.Close()
		return err
	case <-ctx.Done():
	}
	s.SetReady(false)
	if sh.Delay > 0 {
		s.log.Info("not ready; still serving before draining", "delay", sh.Delay)
		t := time.NewTimer(sh.Delay)
		select {
		case <-t.C:
		case err := <-errc:
			t.Stop()
			closePub()
			adm.Close()
			return err
		}
	}
	inFlight, queued := s.load()
	s.gate.Drain() // queued requests get 503 now rather than a seat they would not finish in
	s.log.Info("shutting down: draining", "in_flight", inFlight, "queued_rejected", queued, "drain_timeout", sh.Drain.String())
	start := time.Now()
	sctx, cancel := context.WithTimeout(context.Background(), sh.Drain)
	defer cancel()
	err = shutdownPub(sctx)
	adm.Shutdown(sctx) // after the public listener: /readyz answers "not ready" while it drains
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	left, _ := s.load()
	s.log.Info("shut down", "took", time.Since(start).Round(time.Millisecond).String(),
		"finished", inFlight-min(left, inFlight), "cut_off", left, "clean", err == nil)
	return err
}

// load counts the requests in flight and queued, for the shutdown logs.
func (s *Server) load() (inFlight, queued int) {
	for _, t := range s.gate.TenantStates() {
		inFlight += t.InFlight
	}
	for _, p := range s.gate.PoolsState().Pools {
		queued += p.Queued
	}
	return inFlight, queued
}
