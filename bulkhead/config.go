package bulkhead

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Config describes the pools that share the upstream's concurrency.
//
//	total: 64
//	pools:
//	  enterprise: {share: 4, lendable_percent: 25, borrowing_percent: 50, queue_length: 64, max_wait: 2s}
//	  starter:    {share: 1, lendable_percent: 50, borrowing_percent: 100, queue_length: 16, max_wait: 500ms}
type Config struct {
	// Total is the number of requests the upstream is trusted to serve at
	// once, shared among the pools by their shares. Required, > 0. It is
	// the starting value: [Pools.SetTotal] changes it at run time.
	Total int `yaml:"total"`

	// Pools maps a pool's name to its configuration. At least one.
	Pools map[string]PoolConfig `yaml:"pools"`
}

// PoolConfig describes one pool.
type PoolConfig struct {
	// Share is the pool's weight in the total: its nominal seats are
	// total × share ÷ sum of shares, rounded so that the pools' seats add
	// up to the total, and at least one. Required, 1 to 1,000,000.
	Share int `yaml:"share"`

	// LendablePercent is the part of the pool's nominal seats, 0 to 100,
	// that other pools may borrow while this pool leaves them idle. The
	// rest is always kept for the pool's own requests. Zero (the default)
	// lends nothing.
	LendablePercent int `yaml:"lendable_percent"`

	// BorrowingPercent bounds the seats the pool may borrow from other
	// pools, as a percentage of its own nominal seats; it may exceed 100.
	// Zero (the default) borrows nothing.
	BorrowingPercent int `yaml:"borrowing_percent"`

	// QueueLength is how many requests may wait for a seat, across all
	// flows. Zero (the default) queues nothing: a request that finds no
	// seat fails at once with ErrQueueFull.
	QueueLength int `yaml:"queue_length"`

	// MaxWait is the longest a request waits in the queue before it fails
	// with ErrWaitTimeout; the request's own context deadline, if
	// earlier, ends the wait sooner. Required, > 0, when QueueLength > 0.
	MaxWait time.Duration `yaml:"max_wait"`
}

// Validate reports every field that is wrong, each error naming its field as
// in the YAML, such as "pools.gold.share: must be > 0". Each wraps
// ErrInvalidConfig.
func (c Config) Validate() error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...)))
	}
	if c.Total < 1 || c.Total > 1_000_000 {
		bad("total", "must be between 1 and 1000000, got %d", c.Total)
	}
	if len(c.Pools) == 0 {
		bad("pools", "must define at least one pool")
	}
	names := make([]string, 0, len(c.Pools))
	for name := range c.Pools {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		p, field := c.Pools[name], "pools."+name
		if name == "" {
			bad("pools", "a pool's name must not be empty")
		}
		if p.Share < 1 || p.Share > 1_000_000 {
			bad(field+".share", "must be between 1 and 1000000, got %d", p.Share)
		}
		if p.LendablePercent < 0 || p.LendablePercent > 100 {
			bad(field+".lendable_percent", "must be between 0 and 100, got %d", p.LendablePercent)
		}
		if p.BorrowingPercent < 0 || p.BorrowingPercent > 10_000 {
			bad(field+".borrowing_percent", "must be between 0 and 10000, got %d", p.BorrowingPercent)
		}
		if p.QueueLength < 0 || p.QueueLength > 1_000_000 {
			bad(field+".queue_length", "must be between 0 and 1000000, got %d", p.QueueLength)
		}
		if p.MaxWait < 0 || (p.QueueLength > 0 && p.MaxWait == 0) {
			bad(field+".max_wait", "must be > 0 when queue_length > 0, got %s", p.MaxWait)
		}
	}
	return errors.Join(errs...)
}
