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
	// metrics, tenant state). Default "127.0.0.1:9090"; keep it off the
	// public network.
	AdminListen string `yaml:"admin_listen"`
	// Upstream is the base URL requests are proxied to. Required.
	Upstream string `yaml:"upstream"`
	// Server holds the edge's timeouts and size limits.
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
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = "127.0.0.1:8080"
	}
	if c.AdminListen == "" {
		c.AdminListen = "127.0.0.1:9090"
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
	return c
}

// Validate checks the edge's own fields and each package's config. Errors
// name the field (for example "tiers.pro.rate: must be > 0").
func (c *Config) Validate() error {
	var errs []error
	if c.Upstream == "" {
		errs = append(errs, errors.New("upstream: required (the base URL to proxy to, e.g. http://127.0.0.1:8081)"))
	} else if u, err := url.Parse(c.Upstream); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("upstream: %q is not an http(s) URL with a host", c.Upstream))
	}
	s := c.Server
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"read_header_timeout", s.ReadHeaderTimeout}, {"read_timeout", s.ReadTimeout}, {"idle_timeout", s.IdleTimeout}, {"upstream_timeout", s.UpstreamTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("server.%s: must be >= 0 (0 means the default)", d.name))
		}
	}
	if s.MaxHeaderBytes < 0 {
		errs = append(errs, errors.New("server.max_header_bytes: must be >= 0 (0 means 32 KiB)"))
	}
	if s.MaxBodyBytes < 0 {
		errs = append(errs, errors.New("server.max_body_bytes: must be >= 0 (0 means 10 MiB)"))
	}
	errs = append(errs, c.validateSections()...)
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
func Parse(data []byte) (Config, error) { return parseWith(data, (*Config).Validate) }

// parseWith decodes a config document and checks it with validate.
func parseWith(data []byte, validate func(*Config) error) (Config, error) {
	c, err := decode(data)
	if err != nil {
		return c, err
	}
	if err := validate(&c); err != nil {
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
		return c, cleanYAMLError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return c, errors.New("more than one YAML document")
	}
	return c, nil
}

// Load reads and parses the config file at path. Every error starts with
// the path.
func Load(path string) (Config, error) { return load(path, Parse) }

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

// prefixLines puts "path: " before each line of err's message, so every
// field error names the file too.
func prefixLines(path string, err error) error {
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		lines[i] = path + ": " + l
	}
	return &fileError{msg: strings.Join(lines, "\n"), err: err}
}

type fileError struct {
	msg string
	err error
}

func (e *fileError) Error() string { return e.msg }
func (e *fileError) Unwrap() error { return e.err }

// cleanYAMLError turns yaml.v3's "field x not found in type gateway.Config"
// into "line N: unknown field "x"".
func cleanYAMLError(err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err
	}
	out := make([]string, 0, len(te.Errors))
	for _, e := range te.Errors {
		if i := strings.Index(e, ": field "); i >= 0 && strings.Contains(e, " not found in type ") {
			name := e[i+len(": field "):]
			name = name[:strings.Index(name, " not found in type ")]
			e = e[:i] + ": unknown field \"" + name + "\""
		}
		out = append(out, e)
	}
	return errors.New(strings.Join(out, "\n"))
}
