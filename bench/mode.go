package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/fairgate/fairgate/admission"
	"github.com/fairgate/fairgate/admission/gateway"
	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/admission/redisstore"
)

// Mode is the protection in front of the upstream during a run.
type Mode uint8

const (
	// None is a plain httputil.ReverseProxy: no protection at all.
	None Mode = iota
	// Global is one token bucket for all traffic, counting requests
	// (as nginx limit_req with one zone would), in front of the proxy.
	// Over it: 503.
	Global
	// IP is one token bucket per client address (the connection's source
	// address, never a header), counting requests. Over it: 429.
	IP
	// Fairgate is the whole gateway (gateway.New), embedded memory store.
	Fairgate
	// FairgateRedis is the whole gateway with the Redis store; it needs a
	// Redis address.
	FairgateRedis
	// Direct is no proxy at all: the client talks to the upstream. Only the
	// overhead scenario uses it.
	Direct
	// FixedCost is the whole gateway with each settled route charged its
	// reserve as a fixed cost and nothing settled: usage-based cost's
	// negative control (the usage scenario).
	FixedCost
)

var modeNames = [...]string{"none", "global", "ip", "fairgate", "fairgate-redis", "direct", "fixed-cost"}

// String returns the mode's flag word.
func (m Mode) String() string {
	if int(m) < len(modeNames) {
		return modeNames[m]
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// MarshalText returns the mode's flag word.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText parses a mode's flag word and rejects anything else.
func (m *Mode) UnmarshalText(b []byte) error {
	for i, n := range modeNames {
		if string(b) == n {
			*m = Mode(i)
			return nil
		}
	}
	return fmt.Errorf("bench: unknown mode %q (want %s or %s)", b, strings.Join(modeNames[:FairgateRedis+1], ", "), FixedCost)
}

// ParseModes parses a comma-separated list of modes.
func ParseModes(s string) ([]Mode, error) {
	var out []Mode
	for w := range strings.SplitSeq(s, ",") {
		var m Mode
		if err := m.UnmarshalText([]byte(strings.TrimSpace(w))); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// DefaultModes are the modes that need no external service.
func DefaultModes() []Mode { return []Mode{None, Global, IP, Fairgate} }

// server is something listening on loopback for one run.
type server struct {
	url   string
	close func()
}

// serve serves h on a fresh loopback port.
func serve(h http.Handler) (server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return server{}, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return server{url: "http://" + ln.Addr().String(), close: func() { srv.Close() }}, nil
}

// proxyTransport reaches the upstream from the proxies the bench builds,
// with the same pool sizes as the gateway's default transport.
func proxyTransport() *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 1024,
		IdleConnTimeout:     90 * time.Second,
	}
}

// frontEnv is what a front end needs besides its mode.
type frontEnv struct {
	scenario  *Scenario
	upstream  string
	redisAddr string
}

// startFront starts mode's front end in front of env.upstream.
func startFront(ctx context.Context, m Mode, env frontEnv) (server, error) {
	target, err := url.Parse(env.upstream)
	if err != nil {
		return server{}, err
	}
	tr := proxyTransport()
	proxy := &httputil.ReverseProxy{
		Rewrite:   func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.SetXForwarded() },
		Transport: tr,
		ErrorLog:  discardLog,
	}
	switch m {
	case Direct:
		return server{url: env.upstream, close: func() {}}, nil
	case None:
		return serve(proxy)
	case Global:
		rate := env.scenario.globalRate()
		lim := ratelimit.Limit{Rate: rate, Burst: math.Max(1, rate*env.scenario.GlobalBurst)}
		return serve(limited(proxy, lim, http.StatusServiceUnavailable, "global", func(*http.Request) string { return "all" }))
	case IP:
		lim := ratelimit.Limit{Rate: env.scenario.IPRate, Burst: env.scenario.IPBurst}
		return serve(limited(proxy, lim, http.StatusTooManyRequests, "ip", func(r *http.Request) string {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			return host
		}))
	case Fairgate, FairgateRedis, FixedCost:
		cfg, err := env.scenario.GatewayConfig(env.upstream)
		if err != nil {
			return server{}, err
		}
		if m == FixedCost {
			for i := range cfg.Admission.Routes {
				if rc := &cfg.Admission.Routes[i]; rc.Settle != nil {
					rc.Cost, rc.Settle = rc.Settle.Reserve, nil
				}
			}
		}
		if m == FairgateRedis {
			if env.redisAddr == "" {
				return server{}, errors.New("bench: mode fairgate-redis needs --redis ADDR")
			}
			cfg.Redis = &redisstore.Config{Addrs: []string{env.redisAddr}}
			if err := checkRedis(ctx, *cfg.Redis); err != nil {
				return server{}, err
			}
		}
		gw, err := gateway.New(cfg, gateway.Options{Transport: tr})
		if err != nil {
			return server{}, err
		}
		// Served as fairgate serve serves it: Server.Serve, on the
		// config's engine, with its admin listener.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			gw.Close()
			return server{}, err
		}
		aln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			ln.Close()
			gw.Close()
			return server{}, err
		}
		sctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			gw.Serve(sctx, ln, aln, gateway.Shutdown{})
		}()
		return server{url: "http://" + ln.Addr().String(), close: func() { stop(); <-done; gw.Close() }}, nil
	}
	return server{}, fmt.Errorf("bench: mode %v has no front end", m)
}

// limited puts a token bucket per key(r) in front of next, each request
// costing one token. A rejection follows fairgate's client contract
// (Retry-After and the JSON body) so clients treat all modes alike.
func limited(next http.Handler, lim ratelimit.Limit, status int, layer string, key func(*http.Request) string) http.Handler {
	store := ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{})
	errWord := "rate_limited"
	if status == http.StatusServiceUnavailable {
		errWord = "overloaded"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res, _ := store.Take(r.Context(), ratelimit.BucketKey{Tenant: layer, Scope: key(r)}, lim, 1) // the memory store never fails
		if !res.Allowed {
			secs := max(int64(math.Ceil(res.RetryAfter.Seconds())), 1)
			admission.WriteError(w, status, &admission.Rejection{Error: errWord, Layer: layer, Reason: layer + "_limit",
				RetryAfter: secs, Message: "Over the " + layer + " limit."})
			return
		}
		next.ServeHTTP(w, r)
	})
}
