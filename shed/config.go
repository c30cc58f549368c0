package shed

import (
	"fmt"
	"time"
)

// Defaults applied to zero fields of AdaptiveConfig and SheddingConfig.
const (
	DefaultMin                 = 1
	DefaultMax                 = 200
	DefaultInitial             = 20
	DefaultMaxLatency          = time.Second
	DefaultCalibrationInterval = time.Second
	DefaultMaxRetryAfter       = 30 * time.Second
)

// AdaptiveConfig configures a [Limiter]: the total concurrency the bulkhead
// pools divide, learned from upstream latency. In YAML:
//
//	adaptive:
//	  min: 1
//	  max: 200
//	  initial: 20
//	  max_latency: 1s
//
// A zero field takes its default. Set Min = Max = Initial for a fixed total.
type AdaptiveConfig struct {
	// Min is the lowest the limit goes, in concurrent requests. Zero means
	// DefaultMin (1).
	Min int `yaml:"min" json:"min"`
	// Max is the highest the limit goes, in concurrent requests. Zero means
	// DefaultMax (200).
	Max int `yaml:"max" json:"max"`
	// Initial is the limit before anything is learnt, in concurrent
	// requests; it must lie in [Min, Max]. Zero means DefaultInitial (20),
	// or Min or Max if 20 lies outside them.
	Initial int `yaml:"initial" json:"initial"`
	// MaxLatency is the longest an upstream call may take and still count
	// as healthy. A call that takes longer is never learnt as the new
	// normal: it cuts the limit. Set it well above the upstream's normal
	// latency (its p99 on a good day) and below the callers' timeout. Zero
	// means DefaultMaxLatency (1s).
	MaxLatency time.Duration `yaml:"max_latency" json:"max_latency"`
}

// WithDefaults returns c with every zero field set to its default: the
// limits a Limiter built from c works within and starts at (what
// `fairgate check-config` shows).
func (c AdaptiveConfig) WithDefaults() AdaptiveConfig {
	if c.Min == 0 {
		c.Min = DefaultMin
	}
	if c.Max == 0 {
		c.Max = max(DefaultMax, c.Min)
	}
	if c.Initial == 0 {
		c.Initial = min(max(DefaultInitial, c.Min), c.Max)
	}
	if c.MaxLatency == 0 {
		c.MaxLatency = DefaultMaxLatency
	}
	return c
}

// Validate reports the first invalid field, after defaults, as an error
// wrapping [ErrInvalidConfig] that names it (adaptive.min, ...).
func (c AdaptiveConfig) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.Min < 1:
		return invalid("adaptive.min", "must be >= 1", c.Min)
	case c.Max < c.Min:
		return invalid("adaptive.max", fmt.Sprintf("must be >= adaptive.min (%d)", c.Min), c.Max)
	case c.Initial < c.Min || c.Initial > c.Max:
		return invalid("adaptive.initial", fmt.Sprintf("must be in [adaptive.min, adaptive.max] = [%d, %d]", c.Min, c.Max), c.Initial)
	case c.MaxLatency < 0:
		return invalid("adaptive.max_latency", "must be > 0", c.MaxLatency)
	}
	return nil
}

// SheddingConfig configures a [Shedder]. In YAML:
//
//	shedding:
//	  disabled: false
//	  calibration_interval: 1s
//	  max_retry_after: 30s
//
// The zero value is valid: shedding on, with the defaults.
type SheddingConfig struct {
	// Disabled turns shedding off: Admit admits everything. False (the
	// zero value) means on.
	Disabled bool `yaml:"disabled" json:"disabled"`
	// CalibrationInterval is how often the threshold is recomputed from
	// the pressure observed. It is also the longest admission stays
	// restricted after the pressure has gone. A full queue recalibrates
	// sooner, after a tenth of it. Zero means DefaultCalibrationInterval
	// (1s).
	CalibrationInterval time.Duration `yaml:"calibration_interval" json:"calibration_interval"`
	// MaxRetryAfter caps the Retry-After given to shed requests, which is
	// otherwise the calibration interval divided by the fraction of
	// traffic still admitted. Zero means DefaultMaxRetryAfter (30s).
	MaxRetryAfter time.Duration `yaml:"max_retry_after" json:"max_retry_after"`
}

// WithDefaults returns c with every zero field set to its default: what a
// Shedder built from c runs with.
func (c SheddingConfig) WithDefaults() SheddingConfig {
	if c.CalibrationInterval == 0 {
		c.CalibrationInterval = DefaultCalibrationInterval
	}
	if c.MaxRetryAfter == 0 {
		c.MaxRetryAfter = DefaultMaxRetryAfter
	}
	return c
}

// Validate reports the first invalid field, after defaults, as an error
// wrapping [ErrInvalidConfig] that names it (shedding.calibration_interval,
// ...).
func (c SheddingConfig) Validate() error {
	c = c.WithDefaults()
	switch {
	case c.CalibrationInterval < time.Millisecond:
		return invalid("shedding.calibration_interval", "must be >= 1ms", c.CalibrationInterval)
	case c.MaxRetryAfter < c.CalibrationInterval:
		return invalid("shedding.max_retry_after", fmt.Sprintf("must be >= shedding.calibration_interval (%v)", c.CalibrationInterval), c.MaxRetryAfter)
	}
	return nil
}

// invalid returns the error for field holding got.
func invalid(field, rule string, got any) error {
	return fmt.Errorf("%w: %s: %s (got %v)", ErrInvalidConfig, field, rule, got)
}
