package gateway

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestRequestCtx: the fasthttp edge's request context is cancelled by
// the watch whether or not its Done was asked for first, contexts derived
// from it are cancelled with it, and reset ends the request's context
// for whatever still held it and readies it for the next.
func TestRequestCtx(t *testing.T) {
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		case <-time.After(5 * time.Second):
			return false
		}
	}

	var c requestCtx
	if c.Err() != nil || c.Value("k") != nil {
		t.Fatal("a fresh context is done or has values")
	}
	c.cancel() // before anyone asked for Done
	if !errors.Is(c.Err(), context.Canceled) || !closed(c.Done()) {
		t.Fatalf("cancelled before Done: err %v", c.Err())
	}

	c.reset()
	if c.Err() != nil {
		t.Fatal("reset left the context cancelled")
	}
	child, stop := context.WithTimeout(&c, time.Hour)
	defer stop()
	ran := make(chan struct{})
	context.AfterFunc(&c, func() { close(ran) })
	c.cancel()
	if !closed(child.Done()) || !errors.Is(child.Err(), context.Canceled) {
		t.Fatalf("a derived context was not cancelled with its parent: %v", child.Err())
	}
	if !closed(ran) {
		t.Fatal("context.AfterFunc did not run")
	}

	c.reset()
	held := c.Done()
	c.reset() // the end of the request
	if !closed(held) {
		t.Fatal("reset did not end the request's context for a holder of its Done")
	}
	if c.Err() != nil {
		t.Fatal("the next request's context is done")
	}
}
