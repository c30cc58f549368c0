package gateway

import (
	"context"
	"sync"
	"time"
)

// requestCtx is a request's context on the fasthttp edge: no deadline, no
// values, done when the watch sees its client leave (cancel). Most
// requests never wait on it (a 429 is decided without waiting on
// anything), so the context.WithCancel behind it is made only when its Done
// is first asked for, and a request that never asks costs no allocation.
// It belongs to a pooled exchange: reset gives it to the next request, so
// nothing may keep it after its request is answered.
type requestCtx struct {
	mu       sync.Mutex
	inner    context.Context // made by Done
	cancelFn context.CancelFunc
	canceled bool
}

func (c *requestCtx) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done makes the inner context, cancelled already if the request was.
func (c *requestCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		c.inner, c.cancelFn = context.WithCancel(context.Background())
		if c.canceled {
			c.cancelFn()
		}
	}
	return c.inner.Done()
}

func (c *requestCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.canceled {
		return context.Canceled
	}
	return nil
}

// Value has no values of its own. Once Done has made the inner context it
// answers for it, so that a context derived from this one (after asking
// for Done, as context.WithCancel does) is cancelled with the inner one
// directly, without a goroutine watching.
func (c *requestCtx) Value(key any) any {
	c.mu.Lock()
	inner := c.inner
	c.mu.Unlock()
	if inner == nil {
		return nil
	}
	return inner.Value(key)
}

// cancel cancels the request's context.
func (c *requestCtx) cancel() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.canceled = true
	if c.cancelFn != nil {
		c.cancelFn()
	}
}

// reset readies c for the next request, releasing the inner context.
func (c *requestCtx) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancelFn != nil {
		c.cancelFn()
	}
	c.inner, c.cancelFn, c.canceled = nil, nil, false
}
