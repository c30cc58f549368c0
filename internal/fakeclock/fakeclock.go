// Package fakeclock is a clock that tests move by hand, for code that takes
// its time as a func() time.Time. It is safe for concurrent use.
package fakeclock

import (
	"sync/atomic"
	"time"
)

// Clock is a fake clock. Its zero value reads the Unix epoch; New starts it
// at a fixed date so that failures are reproducible.
type Clock struct{ ns atomic.Int64 }

// New returns a Clock reading 2026-11-30T00:00:00Z.
func New() *Clock {
	c := &Clock{}
	c.ns.Store(time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
