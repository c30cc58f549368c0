package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
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
	// Traces keeps the rejected traces the console shows as span trees;
	// give the same ring to NewTracerProvider (or
	// NewConsoleTracerProvider). Nil means the console has none.
	Traces *TraceRing

	// clock is Now as given (nil: the real clock), for the gate and the
	// embedded store, which then read the monotonic clock alone to time
	// what they need not date.
	clock func() time.Time
}

// Server is the gateway: edge, admission pipeline and reverse proxy.
type Server struct {
	log     *slog.Logger
	gate    *admission.Gate
	store   ratelimit.Store
	edge    http.Handler
	admin   *adminAccess // the admin mux behind the Host and token checks
	cfg     atomic.Pointer[Config]
	ready   atomic.Bool
	started time.Time
	closers []func() error
	tel     *telemetry
	traces  *TraceRing      // nil: none
	history *historySampler // the console's history (console.go)
	// trusted are server.trusted_proxies, fixed at New.
	trusted trustedProxies
}

// Close releases what New opened (the Redis store and client) and stops
// the console's history sampling. Call it after Serve has returned.
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
	access, err := newAdminPolicy(cfg.Admin, cfg.AdminListen) // reads admin.token_file
	if err != nil {
		return nil, err
	}
	tel, closers, err := prepare(cfg, &o)
	if err != nil {
		return nil, err
	}
	reg, err := tenant.NewRegistry(cfg.Tenants)
	if err != nil {
		return nil, err
	}
	gate, err := admission.New(cfg.Admission, reg, admission.Options{Store: o.Store, Now: o.clock, Logger: o.Logger,
		TracerProvider: o.TracerProvider, Metrics: tel.metrics, RecentRejections: cfg.Admin.RecentRejections})
	if err != nil {
		return nil, err
	}
	target, _ := url.Parse(cfg.Upstream) // checked by Validate
	if o.Transport == nil {
		o.Transport = &http.Transport{
			Proxy:       nil,
			DialContext: (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			// Every request admitted goes to the one upstream host, up to
			// the pipeline's concurrency (the bulkhead total and the
			// adaptive max, at most 1024 in any sane config): keep that
			// many idle, so a burst reuses connections instead of
			// dialling and closing them (Go's default is 2 per host).
			MaxIdleConns:        1024,
			MaxIdleConnsPerHost: 1024,
			// The client's Accept-Encoding goes upstream as it is; the
			// transport must not add gzip and then decompress the body.
			DisableCompression:    true,
			IdleConnTimeout:       90 * time.Second,
			ResponseHeaderTimeout: cfg.Server.UpstreamTimeout,
			ExpectContinueTimeout: time.Second,
		}
		if cfg.UpstreamProtocol == UpstreamH2C {
			t := o.Transport.(*http.Transport)
			t.Protocols = new(http.Protocols)
			t.Protocols.SetUnencryptedHTTP2(true)
		}
	}
	trusted, _ := parseTrustedProxies(cfg.Server.TrustedProxies) // checked by Validate
	s := &Server{log: o.Logger, gate: gate, store: o.Store, started: o.Now(), closers: closers, tel: tel, traces: o.Traces,
		trusted: trusted}
	s.cfg.Store(&cfg)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			// X-Forwarded-For/-Host/-Proto are set from what fairgate
			// saw (from a trusted proxy's, forwardedFor); a client's
			// Forwarded and X-Real-IP would contradict them, and a
			// client's W3C baggage and trace parent are not ours to
			// vouch for.
			for _, k := range clientForwarding {
				delete(pr.Out.Header, k)
			}
			pr.SetXForwarded()
			s.trusted.forwardedFor(pr.Out, pr.In) // behind a trusted proxy, its chain
			// Set after hop-by-hop removal, so a client's
			// "Connection: X-Tenant-Id" cannot make the proxy drop them.
			// The middleware set them on the request, so the clone
			// holds them unless hop-by-hop removal took them: set only
			// then (a Set is an allocation per header).
			if d, ok := admission.FromContext(pr.In.Context()); ok && d.Tenant != nil {
				setIfNot(pr.Out.Header, admission.HeaderTenantID, d.Tenant.ID)
				setIfNot(pr.Out.Header, admission.HeaderTenantTier, d.Tenant.Tier)
			}
			setIfNot(pr.Out.Header, admission.HeaderRequestID, pr.In.Header.Get(admission.HeaderRequestID))
			tel.injectTrace(pr.Out)
		},
		Transport: o.Transport,
		ModifyResponse: func(resp *http.Response) error {
			// Headers are in: the adaptive limit learns the upstream's
			// latency now, not the time the client takes to read the body.
			if d, ok := admission.FromContext(resp.Request.Context()); ok {
				d.Lease().AnsweredStatus(resp.StatusCode)
			}
			upstreamAnswering(resp.Request.Context())
			renameUpstreamRateLimit(resp.Header)
			return upstreamAnswered(resp)
		},
		ErrorHandler: s.proxyError,
		BufferPool:   copyBuffers{},
		ErrorLog:     slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
	}
	// A plain handler chain, not a router: every method a route may name
	// (QUERY, PURGE, WebDAV's, "*") reaches the pipeline and then the
	// upstream, and nothing answers for fairgate outside the contract.
	upstream := s.startUpstream(tel.upstreamSpan(proxy))
	s.edge = s.hygiene(gate.ProxyMiddleware(upstream))
	s.history = startHistory(gate, o.Now, admission.HistoryResolution)
	s.closers = append(s.closers, s.history.close)
	s.admin = newAdminAccess(cfg.AdminListen, access, s.adminMux(), o.Now)
	s.ready.Store(true)
	return s, nil
}

// prepare fills o's defaults and builds what the gateway and the rate
// limit service alone share: telemetry and the store (see newStore).
func prepare(cfg Config, o *Options) (tel *telemetry, closers []func() error, err error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.clock = o.Now
	if o.Now == nil {
		o.Now = time.Now
	}
	if tel, err = newTelemetry(o, cfg.Admin.NativeHistograms); err != nil {
		return nil, nil, err
	}
	closers, stats, err := newStore(cfg, o)
	if err != nil {
		return nil, nil, err
	}
	err = tel.reg.Register(newStoreCollector(stats))
	if err == nil && stats != nil {
		// The Redis store's families, for the rate limit service alone
		// too (the gateway's gate would register them itself).
		err = tel.metrics.RegisterStore()
	}
	if err != nil {
		for _, c := range closers {
			_ = c()
		}
		return nil, nil, fmt.Errorf("gateway: metrics: %w", err)
	}
	return tel, closers, nil
}

// newStore sets o.Store, when nil, to the Redis store cfg.Redis describes
// (with o's hooks) or else an embedded store. It returns what Close must
// close and the Redis store's counters for the metrics (nil for a store
// it did not make).
func newStore(cfg Config, o *Options) (closers []func() error, stats func() redisstore.Stats, err error) {
	if o.Store == nil && cfg.Redis != nil {
		client, err := redisstore.NewClient(*cfg.Redis)
		if err != nil {
			return nil, nil, err
		}
		store, err := redisstore.New(client, *cfg.Redis, redisstore.Options{Now: o.Now, Logger: o.Logger,
			OnPolicy: o.OnRedisPolicy, OnBreakerChange: o.OnBreakerChange})
		if err != nil {
			client.Close()
			return nil, nil, err
		}
		o.Store, stats = store, store.Stats
		closers = append(closers, store.Close, client.Close)
	}
	if o.Store == nil {
		o.Store = ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{Now: o.clock})
	}
	return closers, stats, nil
}

// setIfNot sets h[key] to the single value v unless it already is that.
// key is in canonical form.
func setIfNot(h http.Header, key, v string) {
	if old := h[key]; len(old) != 1 || old[0] != v {
		h[key] = []string{v}
	}
}

// copyBuffers are the 32 KiB buffers the proxy copies response bodies
// through, pooled: without a pool ReverseProxy allocates one per request.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { return new([32 << 10]byte) }}

func (copyBuffers) Get() []byte { return copyBufferPool.Get().(*[32 << 10]byte)[:] }
func (copyBuffers) Put(b []byte) {
	if cap(b) >= 32<<10 {
		copyBufferPool.Put((*[32 << 10]byte)(b[:32<<10]))
	}
}

// Config returns the config in force, defaults filled in.
func (s *Server) Config() Config { return *s.cfg.Load() }

// Handler returns the gateway's public handler.
func (s *Server) Handler() http.Handler { return s.edge }

// AdminHandler returns the admin listener's handler, behind the Host and
// token checks of admin_listen and the admin section (AdminConfig).
func (s *Server) AdminHandler() http.Handler { return s.admin }

// Gate returns the admission pipeline.
func (s *Server) Gate() *admission.Gate { return s.gate }

// Reload applies a new config's tenants, tiers and routes to the running
// server. On error nothing changes. Listen addresses and server timeouts
// need a restart; a change to them is logged and ignored. The admin
// section applies at once (admin.token_file is read again), checked
// against the admin listener in use: a reload cannot drop the token of
// one that is not loopback. ctx bounds telling a shared store of the
// quotas that changed (see admission.Gate.Reload).
func (s *Server) Reload(ctx context.Context, cfg Config) error {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	access, err := s.admin.policyFor(cfg)
	if err != nil {
		return err
	}
	reg, err := tenant.NewRegistry(cfg.Tenants)
	if err != nil {
		return err
	}
	if err := s.gate.Reload(ctx, cfg.Admission, reg); err != nil {
		return err
	}
	old := s.cfg.Swap(&cfg)
	s.admin.policy.Store(access)
	// max_body_bytes and write_idle_timeout are read per request and
	// apply at once, gc_percent and memory_limit when main calls ApplyGC
	// after the reload; the rest of these are fixed when the server
	// starts.
	oldSrv, newSrv := old.Server, cfg.Server
	oldSrv.MaxBodyBytes, newSrv.MaxBodyBytes = 0, 0
	oldSrv.WriteIdleTimeout, newSrv.WriteIdleTimeout = 0, 0
	oldSrv.GCPercent, newSrv.GCPercent = 0, 0
	oldSrv.MemoryLimit, newSrv.MemoryLimit = 0, 0
	var later []string
	for _, f := range []struct {
		name    string
		changed bool
	}{
		{"listen", old.Listen != cfg.Listen}, {"admin_listen", old.AdminListen != cfg.AdminListen},
		{"admin.recent_rejections", old.Admin.RecentRejections != cfg.Admin.RecentRejections},
		{"admin.native_histograms", old.Admin.NativeHistograms != cfg.Admin.NativeHistograms},
		{"upstream", old.Upstream != cfg.Upstream || old.UpstreamProtocol != cfg.UpstreamProtocol},
		{"server (timeouts, max_header_bytes, engine, protocols, proxies)", !reflect.DeepEqual(oldSrv, newSrv)},
		{"redis", !reflect.DeepEqual(old.Redis, cfg.Redis)}, {"tracing", !reflect.DeepEqual(old.Tracing, cfg.Tracing)},
		{"rls (the rule files themselves reload)", !reflect.DeepEqual(old.RLS, cfg.RLS)},
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
		r = s.trusted.fromTrustedProxy(r)
		w, r, endGRPC := withGRPCAnswer(w, r)
		defer endGRPC()
		// One backing array for both headers' values (Header.Set would
		// allocate one each).
		ids := [2]string{admission.NewRequestID()}
		ids[1] = ids[0]
		id := ids[0]
		w.Header()[admission.HeaderRequestID] = ids[0:1:1]
		r.Header[admission.HeaderRequestID] = ids[1:2:2]
		ctx, rec := s.beginRequest(r.Context(), r.Method, r.RemoteAddr, id, propagation.HeaderCarrier(r.Header),
			func(tid []byte) { w.Header()[HeaderTraceID] = []string{string(tid)} })
		if !rec.active() {
			inner.ServeHTTP(w, r)
			return
		}
		if ctx != r.Context() {
			r = r.WithContext(ctx)
		}
		sw := &statusWriter{ResponseWriter: w}
		// Deferred: ReverseProxy panics with http.ErrAbortHandler when the
		// client goes away mid-response, and that trace must end too.
		defer func() { rec.end(sw.status) }()
		inner.ServeHTTP(sw, r)
	})
}

// hygieneInner enforces the body limit and the write idle timeout.
func (s *Server) hygieneInner(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(admission.HeaderRequestID)
		srv := s.cfg.Load().Server
		w = newProgressWriter(w, r, srv.WriteIdleTimeout)
		max := srv.MaxBodyBytes
		if announcedTooLarge(w, r.ContentLength, max, id) {
			red := s.gate.StartRequest() // an answer of the edge's own (fastedge's is in its exchange's)
			red.Answered(http.StatusRequestEntityTooLarge)
			return
		}
		// A request without a body (net/http's NoBody: no Content-Length
		// and not chunked) has nothing to limit, and skips the reader's
		// allocation.
		if r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(w, r.Body, max)
		}
		// No protocol upgrades (WebSocket, h2c): a tunnel would carry
		// requests the pipeline never sees. Without the header the
		// request is served as ordinary HTTP, as by a server that does
		// not speak the protocol. (The keys are canonical: delete, not
		// Header.Del, which canonicalizes them again.)
		delete(r.Header, "Upgrade")
		delete(r.Header, "Http2-Settings")
		next.ServeHTTP(w, r)
	})
}

// startUpstream takes the adaptive permit once the body is buffered, just
// before the upstream call, so the adaptive limit times the upstream alone.
// Without pools a reached limit is a 503 from the adaptive layer here.
func (s *Server) startUpstream(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d, ok := admission.FromContext(r.Context()); ok && !d.Lease().StartUpstream(r.Context()) {
			admission.WriteReason(w, admission.ReasonLimitReached, time.Second, w.Header().Get(admission.HeaderRequestID), "")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// renameUpstreamRateLimit renames h's RateLimit fields as
// upstreamRateLimitName says.
func renameUpstreamRateLimit(h http.Header) {
	for k, v := range h {
		if to, ok := upstreamRateLimitName(k); ok {
			delete(h, k)
			h[to] = v
		}
	}
}

// proxyError answers an upstream failure (upstreamFailed).
func (s *Server) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	id := w.Header().Get(admission.HeaderRequestID)
	upstreamFailed(r, err)
	f := s.upstreamFailed(r.Context(), err, id)
	// The upstream did not answer: release now, without teaching the
	// adaptive limit that this was a healthy call (the middleware's later
	// Release does nothing). A call held past max_latency still cuts it.
	if d, ok := admission.FromContext(r.Context()); ok {
		f.release(d.Lease())
	}
	f.answer(w, id)
}
