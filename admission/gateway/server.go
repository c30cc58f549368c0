package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/fairgate/fairgate/admission"
	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/admission/redisstore"
	"github.com/fairgate/fairgate/tenant"
)

// Options are the server's collaborators. The zero value is a working
// default.
type Options struct {
	// Logger receives the server's logs. Nil discards them.
	Logger *slog.Logger
	// Now is the clock. Nil means time.Now.
	Now func() time.Time
	// Store keeps the token buckets. Nil means the embedded memory store.
	Store ratelimit.Store
	// Transport reaches the upstream. Nil means a transport built from the
	// config's upstream timeout.
	Transport http.RoundTripper
	// OnRedisPolicy and OnBreakerChange, when set, are told each time the
	// Redis store applies its failure policy and each time its circuit
	// breaker changes state (for metrics).
	OnRedisPolicy   func(p redisstore.FailurePolicy, cause error)
	OnBreakerChange func(from, to redisstore.BreakerState)
	// TracerProvider makes the request's spans (NewTracerProvider builds
	// one from the config). Nil means no tracing, at no cost per request.
	TracerProvider trace.TracerProvider
	// Metrics is the registry the admin listener's /metrics serves; the
	// server registers its metrics on it. Nil means a new registry (never
	// the global one).
	Metrics *prometheus.Registry
}

// Server is the gateway: edge, admission pipeline and reverse proxy.
type Server struct {
	log     *slog.Logger
	gate    *admission.Gate
	store   ratelimit.Store
	edge    *echo.Echo
	admin   *http.ServeMux
	cfg     atomic.Pointer[Config]
	ready   atomic.Bool
	started time.Time
	closers []func() error
	tel     *telemetry
}

// Close releases what New opened (the Redis store and client). Call it
// after Serve has returned.
func (s *Server) Close() error {
	var errs []error
	for _, c := range s.closers {
		errs = append(errs, c())
	}
	return errors.Join(errs...)
}

// New builds a Server from a checked config. Nothing listens yet.
func New(cfg Config, o Options) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	tel, err := newTelemetry(&o)
	if err != nil {
		return nil, err
	}
	var closers []func() error
	var storeStats func() redisstore.Stats
	instances := 1
	if o.Store == nil && cfg.Redis != nil {
		client, err := redisstore.NewClient(*cfg.Redis)
		if err != nil {
			return nil, err
		}
		store, err := redisstore.New(client, *cfg.Redis, redisstore.Options{Now: o.Now, Logger: o.Logger,
			OnPolicy: o.OnRedisPolicy, OnBreakerChange: o.OnBreakerChange})
		if err != nil {
			client.Close()
			return nil, err
		}
		o.Store, instances, storeStats = store, max(1, cfg.Redis.Instances), store.Stats
		closers = append(closers, store.Close, client.Close)
	}
	if err := tel.reg.Register(newStoreCollector(storeStats)); err != nil {
		for _, c := range closers {
			_ = c()
		}
		return nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	if o.Store == nil {
		o.Store = ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{Now: o.Now})
	}
	reg, err := tenant.NewRegistry(cfg.Tenants)
	if err != nil {
		return nil, err
	}
	gate, err := admission.New(cfg.Admission, reg, admission.Options{Store: o.Store, Now: o.Now, Logger: o.Logger, Instances: instances,
		TracerProvider: o.TracerProvider, Metrics: tel.metrics, DeferAdaptive: true})
	if err != nil {
		return nil, err
	}
	target, _ := url.Parse(cfg.Upstream) // checked by Validate
	if o.Transport == nil {
		o.Transport = &http.Transport{
			Proxy:                 nil,
			DialContext:           (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:          1024,
			MaxIdleConnsPerHost:   1024,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: cfg.Server.UpstreamTimeout,
			ExpectContinueTimeout: time.Second,
		}
	}
	s := &Server{log: o.Logger, gate: gate, store: o.Store, started: o.Now(), closers: closers, tel: tel}
	s.cfg.Store(&cfg)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
			// Set after hop-by-hop removal, so a client's
			// "Connection: X-Tenant-Id" cannot make the proxy drop them.
			if d, ok := admission.FromContext(pr.In.Context()); ok && d.Tenant != nil {
				pr.Out.Header.Set(admission.HeaderTenantID, d.Tenant.ID)
				pr.Out.Header.Set(admission.HeaderTenantTier, d.Tenant.Tier)
			}
			pr.Out.Header.Set(admission.HeaderRequestID, pr.In.Header.Get(admission.HeaderRequestID))
			tel.injectTrace(pr.Out)
		},
		Transport: o.Transport,
		ModifyResponse: func(resp *http.Response) error {
			// Headers are in: the adaptive limit learns the upstream's
			// latency now, not the time the client takes to read the body.
			if d, ok := admission.FromContext(resp.Request.Context()); ok {
				d.UpstreamAnswered()
			}
			return upstreamAnswered(resp)
		},
		ErrorHandler: s.proxyError,
		ErrorLog:     slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Use(echo.WrapMiddleware(s.hygiene))
	e.Use(gate.Echo())
	upstream := s.bufferRequests(s.startUpstream(tel.upstreamSpan(proxy)))
	e.Any("/*", echo.WrapHandler(upstream))
	e.Any("/", echo.WrapHandler(upstream))
	s.edge = e
	s.admin = s.adminMux()
	s.ready.Store(true)
	return s, nil
}

// Handler returns the gateway's public handler.
func (s *Server) Handler() http.Handler { return s.edge }

// AdminHandler returns the admin listener's handler.
func (s *Server) AdminHandler() http.Handler { return s.admin }

// Gate returns the admission pipeline.
func (s *Server) Gate() *admission.Gate { return s.gate }

// Reload applies a new config's tenants, tiers and routes to the running
// server. On error nothing changes. Listen addresses and server timeouts
// need a restart; a change to them is logged and ignored.
func (s *Server) Reload(cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	reg, err := tenant.NewRegistry(cfg.Tenants)
	if err != nil {
		return err
	}
	if err := s.gate.Reload(cfg.Admission, reg); err != nil {
		return err
	}
	old := s.cfg.Swap(&cfg)
	// max_body_bytes is read per request and applies at once; the rest of
	// these are fixed when the server starts.
	oldSrv, newSrv := old.Server, cfg.Server
	oldSrv.MaxBodyBytes, newSrv.MaxBodyBytes = 0, 0
	var later []string
	for _, f := range []struct {
		name    string
		changed bool
	}{
		{"listen", old.Listen != cfg.Listen}, {"admin_listen", old.AdminListen != cfg.AdminListen},
		{"upstream", old.Upstream != cfg.Upstream}, {"server (timeouts, max_header_bytes)", oldSrv != newSrv},
		{"redis", !reflect.DeepEqual(old.Redis, cfg.Redis)}, {"tracing", !reflect.DeepEqual(old.Tracing, cfg.Tracing)},
	} {
		if f.changed {
			later = append(later, f.name)
		}
	}
	if len(later) > 0 {
		s.log.Warn("config reloaded; these changes apply only after a restart", "fields", strings.Join(later, ", "))
	}
	return nil
}

// hygiene is the outermost middleware: a request ID on every response, the
// root span (when tracing) and the access log (at debug level), and the
// body limit (413 before the pipeline runs when Content-Length already
// says too much).
func (s *Server) hygiene(next http.Handler) http.Handler {
	inner := s.hygieneInner(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := admission.NewRequestID()
		w.Header().Set(admission.HeaderRequestID, id)
		r.Header.Set(admission.HeaderRequestID, id)
		r, sp := s.tel.startRequest(w, r)
		logged := s.log.Enabled(r.Context(), slog.LevelDebug)
		if sp == nil && !logged {
			inner.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		// Deferred: ReverseProxy panics with http.ErrAbortHandler when the
		// client goes away mid-response, and that trace must end too.
		defer func() {
			endRequest(sp, sw.status, id)
			if logged {
				s.logRequest(r.Context(), r, sw.status, id, start)
			}
		}()
		inner.ServeHTTP(sw, r)
	})
}

// hygieneInner enforces the body limit.
func (s *Server) hygieneInner(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(admission.HeaderRequestID)
		max := s.cfg.Load().Server.MaxBodyBytes
		if r.ContentLength > max {
			admission.WriteError(w, http.StatusRequestEntityTooLarge, &admission.Rejection{
				Error: "request_too_large", Layer: "edge", Reason: "body_too_large", RequestID: id,
				Message: "The request body is larger than this gateway accepts."})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, max)
		// No protocol upgrades (WebSocket, h2c): a tunnel would carry
		// requests the pipeline never sees. Without the header the
		// request is served as ordinary HTTP, as by a server that does
		// not speak the protocol.
		r.Header.Del("Upgrade")
		r.Header.Del("Http2-Settings")
		next.ServeHTTP(w, r)
	})
}

// startUpstream takes the adaptive permit once the body is buffered, just
// before the upstream call, so the adaptive limit times the upstream alone.
// Without pools a reached limit is a 503 from the adaptive layer here.
func (s *Server) startUpstream(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d, ok := admission.FromContext(r.Context()); ok && !d.StartUpstream() {
			d.Done(false)
			admission.WriteError(w, http.StatusServiceUnavailable, &admission.Rejection{Error: "overloaded",
				Layer: admission.LayerAdaptive.String(), Reason: "limit_reached", RetryAfter: 1,
				RequestID: w.Header().Get(admission.HeaderRequestID),
				Message:   "The service is overloaded (adaptive: limit_reached); this is not your quota. Retry after 1s."})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// proxyError maps an upstream failure to the client contract: 413 when the
// body outgrew the limit while streaming, 504 on an upstream timeout, 502
// when the upstream could not be reached or broke the response, and a
// logged 499 when the client went away (nobody reads it).
func (s *Server) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	id := w.Header().Get(admission.HeaderRequestID)
	upstreamFailed(r, err)
	// The upstream did not answer: release now, without teaching the
	// adaptive limit that this was a healthy call (the middleware's later
	// Done does nothing). A call held past max_latency still cuts it.
	if d, ok := admission.FromContext(r.Context()); ok {
		d.Done(false)
	}
	var mbe *http.MaxBytesError
	var ne net.Error
	switch {
	case errors.As(err, &mbe):
		admission.WriteError(w, http.StatusRequestEntityTooLarge, &admission.Rejection{Error: "request_too_large",
			Layer: "edge", Reason: "body_too_large", RequestID: id, Message: "The request body is larger than this gateway accepts."})
	case r.Context().Err() != nil:
		s.log.InfoContext(r.Context(), "client closed request", "request_id", id, "status", admission.StatusClientClosedRequest)
		w.WriteHeader(admission.StatusClientClosedRequest)
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		s.log.WarnContext(r.Context(), "upstream timeout", "request_id", id, "err", err)
		admission.WriteError(w, http.StatusGatewayTimeout, &admission.Rejection{Error: "upstream_timeout",
			Layer: "proxy", Reason: "timeout", RequestID: id, Message: "The upstream did not answer in time."})
	default:
		s.log.WarnContext(r.Context(), "upstream error", "request_id", id, "err", err)
		admission.WriteError(w, http.StatusBadGateway, &admission.Rejection{Error: "bad_gateway",
			Layer: "proxy", Reason: "upstream_unreachable", RequestID: id, Message: "The upstream could not be reached."})
	}
}

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
	mux.HandleFunc("GET /admin/tenants/{id}", func(w http.ResponseWriter, r *http.Request) {
		st, ok := s.gate.TenantState(r.PathValue("id"))
		if !ok {
			http.Error(w, "unknown tenant\n", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(st)
	})
	return mux
}

// SetReady sets what /readyz answers; shutdown clears it first.
func (s *Server) SetReady(ok bool) { s.ready.Store(ok) }

// HTTPServers returns the public and admin http.Servers, configured with
// the edge's timeouts and limits, for the caller to serve on its listeners.
func (s *Server) HTTPServers() (public, admin *http.Server) {
	c := s.cfg.Load().Server
	public = &http.Server{
		Handler:           s.edge,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    c.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	admin = &http.Server{Handler: s.admin, ReadHeaderTimeout: 5 * time.Second, IdleTimeout: 60 * time.Second}
	return public, admin
}

// Serve serves the gateway on ln and the admin handler on adminLn until ctx
// is done, then shuts down: /readyz fails first, then the listeners close
// and in-flight requests get up to drain to finish.
func (s *Server) Serve(ctx context.Context, ln, adminLn net.Listener, drain time.Duration) error {
	pub, adm := s.HTTPServers()
	errc := make(chan error, 2)
	go func() { errc <- pub.Serve(ln) }()
	go func() { errc <- adm.Serve(adminLn) }()
	select {
	case err := <-errc:
		pub.Close()
		adm.Close()
		return err
	case <-ctx.Done():
	}
	s.SetReady(false)
	s.gate.Drain() // queued requests get 503 now rather than a seat they would not finish in
	sctx, cancel := context.WithTimeout(context.Background(), drain)
	defer cancel()
	err := pub.Shutdown(sctx)
	adm.Shutdown(sctx) // after the public listener: /readyz answers "not ready" while it drains
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}
