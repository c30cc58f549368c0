package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fairgate/fairgate/admission"
	"github.com/fairgate/fairgate/admission/redisstore"
	"github.com/fairgate/fairgate/admission/rls"
	"github.com/fairgate/fairgate/tenant"
)

// Config is the whole config file: the edge's own settings and each
// package's Config, inline, so the file reads as one flat document.
type Config struct {
	// Listen is the gateway's address. Default "127.0.0.1:8080".
	Listen string `yaml:"listen"`
	// AdminListen is the admin listener's address (health, readiness,
	// metrics, tenant state). Default "127.0.0.1:9090". On a loopback
	// address it answers only loopback Host names (see AdminConfig); on
	// any other, admin.token is required. Needs a restart.
	AdminListen string `yaml:"admin_listen"`
	// Upstream is the base URL requests are proxied to. Required.
	Upstream string `yaml:"upstream"`
	// UpstreamProtocol is how requests reach the upstream: http1 (the
	// default) or h2c (HTTP/2 over cleartext, for gRPC servers).
	UpstreamProtocol UpstreamProtocol `yaml:"upstream_protocol"`
	// Server holds the edge's timeouts and size limits, protocols and
	// the proxies it trusts.
	Server ServerConfig `yaml:"server"`

	// Tenants holds tiers and tenants; Admission holds routes and the
	// global and unauthenticated buckets. Both are inline in the file.
	Tenants   tenant.Config    `yaml:",inline"`
	Admission admission.Config `yaml:",inline"`

	// Redis, when set, keeps the token buckets in Redis (single node,
	// Sentinel or Cluster) so that many stateless instances share them.
	// Nil means the embedded in-memory store.
	Redis *redisstore.Config `yaml:"redis"`

	// Tracing exports OpenTelemetry traces over OTLP. Nil means off unless
	// OTEL_EXPORTER_OTLP_ENDPOINT is set (see NewTracerProvider).
	Tracing *TracingConfig `yaml:"tracing"`

	// Admin configures who the admin listener answers, and its console.
	Admin AdminConfig `yaml:"admin"`
	// RLS, when set, also serves Envoy's rate limit service (gRPC) from
	// envoyproxy/ratelimit config files, on the same store. Nil means
	// off. `fairgate rls` runs it alone (see LoadRLS).
	RLS *rls.Config `yaml:"rls"`
}

// ServerConfig is the edge's hygiene: timeouts and size limits. Zero values
// take the defaults given.
type ServerConfig struct {
	// ReadHeaderTimeout bounds reading a request's headers (slowloris).
	// Default 5s.
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds reading a whole request, body included. Default
	// 30s.
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// IdleTimeout closes idle keep-alive connections. Default 120s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxHeaderBytes bounds the request line and headers; beyond it the
	// client gets 431. Default 32 KiB.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxBodyBytes bounds a request body; beyond it the client gets 413
	// and the upstream never sees the request. Default 10 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// UpstreamTimeout bounds one upstream call, from sending the request
	// to the end of the response headers; beyond it the client gets 504.
	// Default 30s.
	UpstreamTimeout time.Duration `yaml:"upstream_timeout"`
	// WriteIdleTimeout bounds how long one write of the response to the
	// client may take: every write must make progress within it, so a
	// client that reads a large response a byte a minute is cut off and
	// gives back its seat, slot and upstream connection, while a long
	// download that keeps moving is not. Default 30s.
	WriteIdleTimeout time.Duration `yaml:"write_idle_timeout"`
	// GCPercent is the Go garbage collector's target (GOGC): the heap
	// may grow this many percent above the live heap before the next
	// collection. Zero means the default: the GOGC environment variable
	// when set, else DefaultGCPercent. -1 turns the proportional
	// collector off and needs MemoryLimit; otherwise 1 to 10000.
	// ApplyGC applies it (the runtime's setting is the process's).
	GCPercent int `yaml:"gc_percent"`
	// MemoryLimit is the Go runtime's soft memory limit in bytes
	// (GOMEMLIMIT): near it the collector runs as often as it must,
	// whatever GCPercent says. Zero means the default: the GOMEMLIMIT
	// environment variable when set, else none. Otherwise at least
	// 16 MiB. Set it (to ~90% of the container's memory) when a large
	// embedded store or a high GCPercent could outgrow the container.
	MemoryLimit int64 `yaml:"memory_limit"`
	// Engine is the HTTP stack of the public listener: EngineNetHTTP
	// (the default: HTTP/1.1, HTTP/2 over TLS and h2c, gRPC) or
	// EngineFast (HTTP/1.x itself, HTTP/2 handed to net/http; opt-in;
	// docs/configuration.md lists where it differs).
	// The admin listener is net/http either way, and so is Handler, for
	// embedders. Needs a restart.
	Engine Engine `yaml:"engine"`
	// TLS, when set, serves the public listener over TLS, HTTP/2 and
	// HTTP/1.1 chosen by ALPN. The certificate files are read again when
	// they change, without dropping connections. Nil means cleartext.
	TLS *TLSConfig `yaml:"tls"`
	// H2C serves HTTP/2 over cleartext to clients that open with its
	// preface (prior knowledge), beside HTTP/1.1 on the same listener.
	// Nil means true. (An HTTP/1.1 "Upgrade: h2c" is never honoured.)
	H2C *bool `yaml:"h2c"`
	// TrustedProxies are the networks (CIDRs, or single addresses) of the
	// load balancers in front of the gateway. The client's address is
	// then the rightmost X-Forwarded-For hop not in them (for the
	// unauthenticated and auth: none buckets, the access log and the
	// span), and a trusted proxy's X-Forwarded-Proto is kept. Empty means
	// none: the peer is the client and X-Forwarded-* are fairgate's own.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// ProxyProtocol reads the PROXY protocol (v1 or v2) header that a load
	// balancer sends first on each connection, and takes the client's
	// address from it. A connection without one is refused. Default
	// false.
	ProxyProtocol bool `yaml:"proxy_protocol"`
}

// TLSConfig is the public listener's certificate.
type TLSConfig struct {
	// CertFile and KeyFile are PEM files: the certificate chain and its
	// private key. Both required.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// Engine is an HTTP stack the public listener may run on
// (ServerConfig.Engine).
type Engine string

// The engines.
const (
	EngineNetHTTP Engine = "net/http"
	EngineFast    Engine = "fasthttp"
)

// UnmarshalText accepts the engines' names and empty (the default), and
// rejects anything else at load time.
func (e *Engine) UnmarshalText(b []byte) error {
	return oneOf(e, b, EngineNetHTTP, EngineFast)
}

// oneOf sets *v to b if b is empty or one of words, and is an error
// otherwise (the decoder, or Validate, prefixes the field).
func oneOf[T ~string](v *T, b []byte, words ...T) error {
	if len(b) == 0 || slices.Contains(words, T(b)) {
		*v = T(b)
		return nil
	}
	list := make([]string, len(words))
	for i, w := range words {
		list[i] = string(w)
	}
	return fmt.Errorf("%q is not %s", b, strings.Join(list, " or "))
}

// UpstreamProtocol is how the gateway speaks to the upstream.
type UpstreamProtocol string

// The upstream protocols.
const (
	// UpstreamHTTP1 is HTTP/1.1 (over TLS for an https upstream, where
	// ALPN may still choose HTTP/2).
	UpstreamHTTP1 UpstreamProtocol = "http1"
	// UpstreamH2C is HTTP/2 over cleartext with prior knowledge, as gRPC
	// servers speak it.
	UpstreamH2C UpstreamProtocol = "h2c"
)

// UnmarshalText accepts http1, h2c or empty (http1), and rejects anything
// else at load time.
func (p *UpstreamProtocol) UnmarshalText(b []byte) error {
	return oneOf(p, b, UpstreamHTTP1, UpstreamH2C)
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if c.AdminListen == "" {
		c.AdminListen = defaultAdminListen
	}
	s := &c.Server
	if s.ReadHeaderTimeout == 0 {
		s.ReadHeaderTimeout = 5 * time.Second
	}
	if s.ReadTimeout == 0 {
		s.ReadTimeout = 30 * time.Second
	}
	if s.IdleTimeout == 0 {
		s.IdleTimeout = 120 * time.Second
	}
	if s.MaxHeaderBytes == 0 {
		s.MaxHeaderBytes = 32 << 10
	}
	if s.MaxBodyBytes == 0 {
		s.MaxBodyBytes = 10 << 20
	}
	if s.UpstreamTimeout == 0 {
		s.UpstreamTimeout = 30 * time.Second
	}
	if s.WriteIdleTimeout == 0 {
		s.WriteIdleTimeout = 30 * time.Second
	}
	if s.Engine == "" {
		s.Engine = EngineNetHTTP
	}
	if s.H2C == nil {
		s.H2C = new(true)
	}
	if c.UpstreamProtocol == "" {
		c.UpstreamProtocol = UpstreamHTTP1
	}
	return c
}

// Validate checks the edge's own fields and each package's config. Errors
// name the field (for example "tiers.pro.rate: must be > 0").
func (c *Config) Validate() error { return c.validate(true) }

// validate is Validate; an embedded config (needUpstream false) may leave
// upstream out.
func (c *Config) validate(needUpstream bool) error {
	var errs []error
	if c.Upstream == "" && !needUpstream {
		// Embedded: the handler behind the middleware is the upstream.
	} else if c.Upstream == "" {
		errs = append(errs, errors.New("upstream: required (the base URL to proxy to, e.g. http://127.0.0.1:8081)"))
	} else if u, err := url.Parse(c.Upstream); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("upstream: %q is not an http(s) URL with a host", c.Upstream))
	}
	s := c.Server
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"read_header_timeout", s.ReadHeaderTimeout}, {"read_timeout", s.ReadTimeout}, {"idle_timeout", s.IdleTimeout}, {"upstream_timeout", s.UpstreamTimeout}, {"write_idle_timeout", s.WriteIdleTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("server.%s: must be >= 0 (0 means the default)", d.name))
		}
	}
	if s.MaxHeaderBytes < 0 {
		errs = append(errs, errors.New("server.max_header_bytes: must be >= 0 (0 means 32 KiB)"))
	}
	if err := new(Engine).UnmarshalText([]byte(s.Engine)); err != nil {
		errs = append(errs, fmt.Errorf("server.engine: %w", err))
	}
	if err := new(UpstreamProtocol).UnmarshalText([]byte(c.UpstreamProtocol)); err != nil {
		errs = append(errs, fmt.Errorf("upstream_protocol: %w", err))
	}
	errs = append(errs, s.validateEdge()...)
	if c.UpstreamProtocol == UpstreamH2C && strings.HasPrefix(c.Upstream, "https:") {
		errs = append(errs, errors.New("upstream_protocol: h2c is cleartext; an https upstream negotiates HTTP/2 by ALPN with http1"))
	}
	if s.MaxBodyBytes < 0 {
		errs = append(errs, errors.New("server.max_body_bytes: must be >= 0 (0 means 10 MiB)"))
	}
	errs = append(errs, s.validateGC()...)
	errs = append(errs, c.validateSections()...)
	errs = append(errs, c.validateAdmin()...)
	if n := c.Admin.RecentRejections; n < 0 || n > admission.MaxRecentRejections {
		errs = append(errs, fmt.Errorf("admin.recent_rejections: %d must be in [0, %d] (0 means %d)", n, admission.MaxRecentRejections, admission.DefaultRecentRejections))
	}
	if reg, err := tenant.NewRegistry(c.Tenants); err != nil {
		errs = append(errs, err)
		if err := c.Admission.Validate(); err != nil {
			errs = append(errs, err)
		}
	} else if _, err := admission.New(c.Admission, reg, admission.Options{}); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// validateSections checks the optional sections serve and rls share:
// redis, tracing and rls.
func (c *Config) validateSections() []error {
	var errs []error
	for _, v := range []interface{ Validate() error }{c.Redis, c.Tracing, c.RLS} {
		if reflect.ValueOf(v).IsNil() {
			continue
		}
		if err := v.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// Parse decodes a config document. Unknown fields are errors (a typo must
// not be silently ignored), and so is a second document in the same file.
func Parse(data []byte) (Config, error) {
	return parseWith(data, func(c *Config) error { return c.validate(true) })
}

// ParseEmbedded is Parse for a service that embeds the admission middleware
// (see the package example): upstream may be left out, since the handler
// behind the middleware is the upstream. Of the server section only
// max_body_bytes means anything there, and only if the embedder applies it
// (http.MaxBytesHandler); listen, admin_listen, the timeouts and tracing
// are the embedding server's business.
func ParseEmbedded(data []byte) (Config, error) {
	return parseWith(data, func(c *Config) error { return c.validate(false) })
}

// parseWith decodes a config document and checks it with validate (and
// for costs the file sets to 0).
func parseWith(data []byte, validate func(*Config) error) (Config, error) {
	c, err := decode(data)
	if err != nil {
		return c, err
	}
	if err := errors.Join(append(zeroCosts(data), validate(&c))...); err != nil {
		return c, err
	}
	return c.withDefaults(), nil
}

// decode decodes a config document without validating it.
func decode(data []byte) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		if errors.Is(err, io.EOF) {
			return c, errors.New("empty config")
		}
		return c, cleanYAMLError(err, data)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return c, errors.New("more than one YAML document")
	}
	return c, nil
}

// zeroCosts finds the costs the file sets to 0 explicitly. In Go a zero
// cost means "not set" (cost 1), but a file that says "cost: 0" means a
// free route, which fairgate refuses.
func zeroCosts(data []byte) []error {
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return nil
	}
	var errs []error
	isZero := func(m *yaml.Node) bool {
		v := mappingValue(m, "cost")
		var f float64
		return v != nil && v.Decode(&f) == nil && f == 0
	}
	root := doc.Content[0]
	if routes := mappingValue(root, "routes"); routes != nil && routes.Kind == yaml.SequenceNode {
		for i, r := range routes.Content {
			if isZero(r) {
				errs = append(errs, fmt.Errorf("routes[%d].cost: must be >= 1 (tokens); 0 would make the route free", i))
			}
		}
	}
	if u := mappingValue(root, "unmatched"); u != nil && isZero(u) {
		errs = append(errs, errors.New("unmatched.cost: must be >= 1 (tokens); 0 would make unmatched requests free"))
	}
	return errs
}

// mappingValue returns the value of key in mapping node m, or nil.
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// Load reads and parses the config file at path. Every error starts with
// the path.
func Load(path string) (Config, error) { return load(path, Parse) }

// LoadEmbedded is Load with ParseEmbedded: upstream may be left out.
func LoadEmbedded(path string) (Config, error) { return load(path, ParseEmbedded) }

// load reads the file at path and parses it with parse, prefixing every
// error with the path.
func load(path string, parse func([]byte) (Config, error)) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	c, err := parse(data)
	if err != nil {
		return c, prefixLines(path, err)
	}
	if c.RLS != nil {
		c.RLS.Configs = c.RLS.ResolvePaths(filepath.Dir(path))
	}
	return c, nil
}
