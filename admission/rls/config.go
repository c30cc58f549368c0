package rls

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"
)

// DefaultListen is the rate limit service's address when rls.listen is
// not set.
const DefaultListen = "127.0.0.1:8089"

// Config is the `rls:` section of fairgate's config file. Its presence
// starts the service; the zero value of each field is its documented
// default.
type Config struct {
	// Listen is the gRPC address Envoy's rate_limit_service cluster
	// points at. Empty means DefaultListen (loopback only).
	Listen string `yaml:"listen"`
	// Configs lists envoyproxy/ratelimit config files, or folders whose
	// *.yaml and *.yml files are read. At least one is required. Relative
	// paths are relative to the folder of the file that holds this
	// section (see ResolvePaths).
	Configs []string `yaml:"configs"`
	// MergeDomainConfig lets several of those files configure one domain
	// (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG=true): their top-level
	// descriptors are merged, in the order the files are read; the same
	// descriptor in two files is still an error (see Loader). False (the
	// default) refuses a domain's second file.
	MergeDomainConfig bool `yaml:"merge_domain_config"`
	// Shadow puts every descriptor in shadow mode (as envoyproxy/ratelimit's
	// SHADOW_MODE=true): decisions and tokens as usual, but every answer is
	// OK, would-be rejections counted as outcome="shadow_reject". False
	// (the default) leaves it to each descriptor's shadow_mode.
	Shadow bool `yaml:"shadow"`
	// Window is how every rate_limit without a window of its own counts
	// (a rate_limit's window wins): bucket, a token bucket of burst
	// requests_per_unit refilled over one unit; or fixed, as
	// envoyproxy/ratelimit counts, requests_per_unit in each window of a
	// unit that starts full at the unit's boundaries (a daily limit at
	// 00:00 UTC; see WindowFixed). Unset (the default) means bucket.
	Window Window `yaml:"window"`
	// ResponseHeaders adds the IETF RateLimit headers (and Retry-After when
	// over the limit) to response_headers_to_add, for Envoy to send to the
	// client. False (the default) sends none, as envoyproxy/ratelimit
	// does unless LIMIT_RESPONSE_HEADERS_ENABLED is set.
	ResponseHeaders bool `yaml:"response_headers"`
	// Reflection registers gRPC server reflection (for grpcurl). False by
	// default.
	Reflection bool `yaml:"reflection"`
	// Drain bounds a graceful stop: in-flight calls get this long to
	// finish before the server stops hard. Zero means 5s.
	Drain time.Duration `yaml:"drain"`
	// NearLimitRatio is the share of a limit past which an admitted
	// decision counts as near the limit (fairgate_rls_near_limit_total),
	// as envoyproxy/ratelimit's NEAR_LIMIT_RATIO. Zero means 0.8; at most
	// 1.
	NearLimitRatio float64 `yaml:"near_limit_ratio"`
	// Limits bounds what one call may ask and how the gRPC server
	// serves it (see Limits).
	Limits `yaml:",inline"`
	// TLS, when set, serves gRPC over TLS (and, with a client CA, asks
	// every client for a certificate). Nil means cleartext HTTP/2, as
	// Envoy's rate_limit_service cluster speaks by default.
	TLS *TLSConfig `yaml:"tls"`
}

// Validate checks the section; errors name the field (under "rls.").
func (c *Config) Validate() error {
	var errs []error
	if c.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			errs = append(errs, fmt.Errorf("rls.listen: %q is not host:port", c.Listen))
		}
	}
	if len(c.Configs) == 0 {
		errs = append(errs, errors.New("rls.configs: at least one file or folder of envoyproxy/ratelimit configs is required"))
	}
	for i, p := range c.Configs {
		if p == "" {
			errs = append(errs, fmt.Errorf("rls.configs[%d]: empty path", i))
		}
	}
	if c.Drain < 0 {
		errs = append(errs, errors.New("rls.drain: must be >= 0 (0 means 5s)"))
	}
	if c.Window > WindowFixed {
		errs = append(errs, fmt.Errorf("rls.window: %v is not fixed or bucket", c.Window))
	}
	if r := c.NearLimitRatio; !(r >= 0 && r <= 1) {
		errs = append(errs, fmt.Errorf("rls.near_limit_ratio: %v is not between 0 and 1 (0 means 0.8)", r))
	}
	errs = append(errs, c.Limits.validate()...)
	errs = append(errs, c.TLS.validate()...)
	return errors.Join(errs...)
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.NearLimitRatio == 0 {
		c.NearLimitRatio = DefaultNearLimitRatio
	}
	c.Limits = c.Limits.withDefaults()
	if c.Drain == 0 {
		c.Drain = 5 * time.Second
	}
	return c
}

// ResolvePaths returns Configs with each relative path joined to dir.
func (c Config) ResolvePaths(dir string) []string {
	out := make([]string, len(c.Configs))
	for i, p := range c.Configs {
		if p != "" && !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		out[i] = p
	}
	return out
}

// ListenAddr returns the address to listen on: Listen, or DefaultListen.
func (c Config) ListenAddr() string { return c.withDefaults().Listen }
