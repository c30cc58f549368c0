package redisstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Defaults for the zero values of Config.
const (
	DefaultTimeout         = 5 * time.Millisecond
	DefaultBreakerFailures = 5
	DefaultBreakerOpenFor  = time.Second
	DefaultMaxInFlight     = 16
	DefaultMaxBatch        = 128
	DefaultDenyCacheSize   = 65536
	DefaultLogEvery        = 10 * time.Second
	DefaultSyncInterval    = 50 * time.Millisecond
	DefaultHeartbeat       = time.Second
)

// Config is the `redis:` section of the config file. The zero value of each
// field is its documented default; Validate rejects what cannot work, naming
// the field.
type Config struct {
	// Addrs lists host:port addresses: one for a single node, the seed
	// nodes for a cluster, or the Sentinels when MasterName is set.
	// At least one is required.
	Addrs []string `yaml:"addrs"`
	// MasterName is the Sentinel master set's name. Empty means no
	// Sentinel.
	MasterName string `yaml:"master_name"`
	// Cluster selects Redis Cluster. Buckets use a gateway-owned hash tag,
	// so every script touches one slot.
	Cluster bool `yaml:"cluster"`
	// Username and Password authenticate (ACL user, or password alone for
	// requirepass). Empty means none.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// DB is the database number; 0 by default and the only one a cluster
	// has.
	DB int `yaml:"db"`
	// TLS configures TLS. The zero value is plain TCP.
	TLS TLSConfig `yaml:"tls"`
	// PoolSize is the connection pool size per node. Zero means go-redis's
	// default, 10 per CPU. Batches use at most Batch.MaxInFlight of them
	// per node, unbatched decisions at most all.
	PoolSize int `yaml:"pool_size"`
	// Timeout is what a Redis round trip may take, from the instant its
	// pipeline is sent. A reply later than it still decides and is
	// counted slow: the pipelines in flight halve, but the breaker does
	// not count it (a reply that came is Redis answering). A round trip
	// with no reply within three Timeouts fails, counts towards the
	// breaker and its decisions go to the failure policy. Time spent in
	// this instance's own queue is not part of it (see QueueTimeout).
	// Zero means DefaultTimeout (5ms), for Redis on the same host or in
	// the same zone (docs/redis.md says how to size it).
	Timeout time.Duration `yaml:"timeout"`
	// QueueTimeout bounds how long a decision waits in this instance's
	// own queue for a pipeline (or, unbatched, a connection): past it the
	// rate layer is overloaded, and the failure policy decides with cause
	// ErrOverloaded, counted and logged apart from Redis trouble and never
	// opening the breaker. A decision therefore takes at most QueueTimeout
	// plus lateFactor (3) Timeouts. Zero means ten times Timeout (50ms
	// with the default Timeout): a queued decision waits for the round
	// trips in flight, which may take up to three Timeouts.
	QueueTimeout time.Duration `yaml:"queue_timeout"`
	// Mode is Exact (the default: one script call per decision, batched)
	// or Sync (local decisions reconciled with Redis every SyncInterval;
	// see Mode for the trade-off and its bound).
	Mode Mode `yaml:"mode"`
	// SyncInterval is how often sync mode reconciles each bucket in use
	// with Redis. Zero means DefaultSyncInterval (50ms). Shorter is more
	// exact and costs Redis one script call per active bucket per
	// instance per interval.
	SyncInterval time.Duration `yaml:"sync_interval"`
	// BackstopMode is how the fair global backstop is kept: BackstopSync
	// (the default, sharded and reconciled every SyncInterval, in either
	// Mode) or BackstopExact (one hash, a script call per request).
	BackstopMode BackstopMode `yaml:"backstop_mode"`
	// FailurePolicy says what a decision is while Redis cannot answer.
	// The zero value is Local.
	FailurePolicy FailurePolicy `yaml:"failure_policy"`
	// Instances overrides the number of gateway instances sharing the
	// Redis. Under the Local policy each instance enforces 1/Instances of
	// every quota; in sync mode each may take 1/Instances of a bucket's
	// tokens between reconciliations; each enforces ceil(max_concurrent /
	// Instances) of a tenant's concurrency cap. Zero (the default) means
	// the live count: instances announce themselves in Redis every
	// Heartbeat and each learns how many are alive (see members).
	Instances int `yaml:"instances"`
	// Heartbeat is how often an instance renews its entry in the fleet's
	// membership and learns the live count; an entry not renewed for three
	// heartbeats expires. Zero means DefaultHeartbeat (1s).
	Heartbeat time.Duration `yaml:"heartbeat"`
	// Breaker configures the circuit breaker in front of Redis.
	Breaker BreakerConfig `yaml:"breaker"`
	// Batch configures auto-batching of concurrent decisions.
	Batch BatchConfig `yaml:"batch"`
	// DenyCacheSize bounds the denial cache (entries). Zero means
	// DefaultDenyCacheSize; negative disables the cache.
	DenyCacheSize int `yaml:"deny_cache_size"`
	// LogEvery is the least time between two log lines about the failure
	// policy; events in between are counted into the next line. Zero means
	// DefaultLogEvery (10s).
	LogEvery time.Duration `yaml:"log_every"`
}

// TLSConfig enables TLS to Redis.
type TLSConfig struct {
	// Enabled turns TLS on. False (the default) is plain TCP.
	Enabled bool `yaml:"enabled"`
	// ServerName overrides the name verified in the server's certificate.
	// Empty means the host of the address dialled.
	ServerName string `yaml:"server_name"`
	// CAFile is a PEM file of CA certificates to trust. Empty means the
	// system pool.
	CAFile string `yaml:"ca_file"`
	// InsecureSkipVerify disables certificate verification; for tests
	// only.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
}

// BreakerConfig configures the circuit breaker. While it is open no
// decision asks Redis (the failure policy answers at once); after OpenFor it
// lets one probe through and closes again when the probe succeeds.
type BreakerConfig struct {
	// Failures is the number of consecutive failed decisions that opens
	// the breaker. Zero means DefaultBreakerFailures (5).
	Failures int `yaml:"failures"`
	// OpenFor is how long the breaker stays open before probing. Zero
	// means DefaultBreakerOpenFor (1s). It is also the Retry-After of a
	// FailClosed rejection.
	OpenFor time.Duration `yaml:"open_for"`
}

// BatchConfig configures auto-batching: concurrent decisions that arrive
// while a pipeline is in flight are sent together as the next pipeline, as
// soon as a pipeline slot is free. There is no timer window: a lone decision
// goes out at once on its caller's goroutine. The number of pipelines in
// flight adapts between 4 and MaxInFlight: it grows while more decisions
// wait than one pipeline carries and round trips stay under half of
// Timeout, and halves when a round trip is slow or fails.
type BatchConfig struct {
	// Disabled sends every decision as its own EVALSHA. False (the
	// default) batches.
	Disabled bool `yaml:"disabled"`
	// MaxInFlight caps the pipelines in flight at once per Redis node,
	// each on its own connection. Zero means DefaultMaxInFlight (16), or
	// the pool size when that is smaller.
	MaxInFlight int `yaml:"max_in_flight"`
	// MaxBatch caps the decisions one pipeline carries, so that a
	// pipeline's own work in Redis stays far below Timeout. Zero means
	// DefaultMaxBatch (128).
	MaxBatch int `yaml:"max_batch"`
}

// Validate checks c and returns every problem found, each naming its field
// (for example "redis.timeout: must be > 0").
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("redis.%s: %s", field, fmt.Sprintf(format, a...)))
	}
	if len(c.Addrs) == 0 {
		bad("addrs", "at least one host:port is required")
	}
	for i, a := range c.Addrs {
		if a == "" {
			bad(fmt.Sprintf("addrs[%d]", i), "empty address")
		}
	}
	if len(c.Addrs) > 1 && !c.Cluster && c.MasterName == "" {
		bad("addrs", "%d addresses need cluster: true or master_name (Sentinel)", len(c.Addrs))
	}
	if c.Cluster && c.MasterName != "" {
		bad("master_name", "cannot be combined with cluster: true")
	}
	if c.DB < 0 {
		bad("db", "must be >= 0")
	}
	if c.Cluster && c.DB != 0 {
		bad("db", "must be 0 with cluster: true")
	}
	if c.PoolSize < 0 {
		bad("pool_size", "must be >= 0 (0 means 10 per CPU)")
	}
	if c.Timeout < 0 {
		bad("timeout", "must be > 0 (0 means %v)", DefaultTimeout)
	}
	if c.Instances < 0 {
		bad("instances", "must be >= 1 (0 means the live count)")
	}
	if c.Heartbeat < 0 {
		bad("heartbeat", "must be > 0 (0 means %v)", DefaultHeartbeat)
	}
	if c.FailurePolicy > FailClosed {
		bad("failure_policy", "unknown policy %d", c.FailurePolicy)
	}
	if c.Breaker.Failures < 0 {
		bad("breaker.failures", "must be >= 1 (0 means %d)", DefaultBreakerFailures)
	}
	if c.Breaker.OpenFor < 0 {
		bad("breaker.open_for", "must be > 0 (0 means %v)", DefaultBreakerOpenFor)
	}
	if c.Batch.MaxInFlight < 0 {
		bad("batch.max_in_flight", "must be >= 1 (0 means %d)", DefaultMaxInFlight)
	}
	if c.PoolSize > 0 && c.Batch.MaxInFlight > c.PoolSize {
		bad("batch.max_in_flight", "%d pipelines in flight need as many connections; pool_size is %d", c.Batch.MaxInFlight, c.PoolSize)
	}
	if c.Batch.MaxBatch < 0 {
		bad("batch.max_batch", "must be >= 1 (0 means %d)", DefaultMaxBatch)
	}
	if c.QueueTimeout < 0 {
		bad("queue_timeout", "must be > 0 (0 means ten times timeout)")
	}
	if c.BackstopMode > BackstopExact {
		bad("backstop_mode", "unknown backstop mode %d", c.BackstopMode)
	}
	if c.Mode > Sync {
		bad("mode", "unknown mode %d", c.Mode)
	}
	if c.SyncInterval < 0 {
		bad("sync_interval", "must be > 0 (0 means %v)", DefaultSyncInterval)
	}
	if c.LogEvery < 0 {
		bad("log_every", "must be > 0 (0 means %v)", DefaultLogEvery)
	}
	if c.TLS.CAFile != "" && !c.TLS.Enabled {
		bad("tls.ca_file", "set, but tls.enabled is false")
	}
	return errors.Join(errs...)
}

// withDefaults returns c with every zero value replaced by its default.
func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.Breaker.Failures == 0 {
		c.Breaker.Failures = DefaultBreakerFailures
	}
	if c.Breaker.OpenFor == 0 {
		c.Breaker.OpenFor = DefaultBreakerOpenFor
	}
	if c.Batch.MaxInFlight == 0 {
		c.Batch.MaxInFlight = min(DefaultMaxInFlight, poolSize(c))
	}
	if c.Batch.MaxBatch == 0 {
		c.Batch.MaxBatch = DefaultMaxBatch
	}
	if c.QueueTimeout == 0 {
		c.QueueTimeout = 10 * c.Timeout
	}
	if c.DenyCacheSize == 0 {
		c.DenyCacheSize = DefaultDenyCacheSize
	}
	if c.LogEvery == 0 {
		c.LogEvery = DefaultLogEvery
	}
	if c.SyncInterval == 0 {
		c.SyncInterval = DefaultSyncInterval
	}
	return c
}

// poolSize is the connection pool size per node that c gives go-redis.
func poolSize(c Config) int {
	if c.PoolSize > 0 {
		return c.PoolSize
	}
	return 10 * runtime.GOMAXPROCS(0)
}

// NewClient validates c and builds the go-redis client it describes: a
// single node, a Sentinel-backed failover client (MasterName) or a cluster
// client (Cluster). A retried take could take twice, so the client does not
// retry (MaxRetries -1), and the Cluster client's own retries on connection
// errors are made to back off past the per-call deadline, so none is sent
// in time. It honours context deadlines, which is how the Store enforces
// Timeout. The caller closes it.
func NewClient(c Config) (redis.UniversalClient, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	c = c.withDefaults()
	o := &redis.UniversalOptions{
		Addrs:         c.Addrs,
		MasterName:    c.MasterName,
		IsClusterMode: c.Cluster,
		Username:      c.Username,
		Password:      c.Password,
		DB:            c.DB,
		PoolSize:      c.PoolSize,
		MaxRetries:    -1,
		// A Cluster client retries a pipeline on connection errors even
		// with MaxRetries -1, re-sending calls that may already have taken
		// tokens. A retry backoff longer than the per-call deadline means
		// no retry is ever sent in time; MOVED/ASK redirects, which do not
		// back off, still work.
		MinRetryBackoff:       max(10*time.Millisecond, 2*c.Timeout),
		MaxRetryBackoff:       max(10*time.Millisecond, 2*c.Timeout),
		DialerRetries:         1,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
		// Maintenance notifications are a Redis Cloud feature; asking for
		// them costs a round trip per new connection.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
	if c.TLS.Enabled {
		tc := &tls.Config{
			MinVersion:         tls.VersionTLS12,
			ServerName:         c.TLS.ServerName,
			InsecureSkipVerify: c.TLS.InsecureSkipVerify, //nolint:gosec // opt-in, documented as test-only
		}
		if c.TLS.CAFile != "" {
			pem, err := os.ReadFile(c.TLS.CAFile)
			if err != nil {
				return nil, fmt.Errorf("redisstore: redis.tls.ca_file: %w", err)
			}
			tc.RootCAs = x509.NewCertPool()
			if !tc.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("redisstore: redis.tls.ca_file: no PEM certificates in %s", c.TLS.CAFile)
			}
		}
		o.TLSConfig = tc
	}
	return redis.NewUniversalClient(o), nil
}
