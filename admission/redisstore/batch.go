package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// call is one decision on its way to Redis.
type call struct {
	key      string
	l        ratelimit.Limit
	cost     float64
	deadline time.Time // the call's own: when it started plus Timeout, or sooner

	// Set by the batch's runner before the call is signalled.
	rep reply
	err error

	// ch receives exactly one message: nil when rep and err are set, or a
	// batch (holding this call) that this call's goroutine must now run.
	ch chan []*call
}

var callPool = sync.Pool{New: func() any { return &call{ch: make(chan []*call, 1)} }}

// batcher shares round trips among concurrent decisions without a timer
// window and without a goroutine of its own. A caller that finds fewer than
// max pipelines in flight runs one at once, on its own goroutine, holding
// itself and everything queued. A caller that finds max in flight queues
// and waits. When a pipeline finishes, its runner hands the whole queue, as
// the next pipeline, to the first queued caller, and returns. So a lone
// caller pays one mutex more than a direct call, and under load each
// pipeline carries whatever arrived while the previous ones were in flight.
//
// Deadlines: every queued call was queued after the calls of every
// pipeline in flight, and a pipeline's deadline is the earliest of its
// calls', so a queued call is taken before its own deadline and finished by
// it; no per-call timer is needed.
type batcher struct {
	max int
	run func(batch []*call) // sets rep or err of every call in batch

	mu       sync.Mutex
	queue    []*call
	inflight int
}

// do runs c, alone or batched, and returns once c.rep or c.err is set. If
// ctx ends while c is still queued, c is withdrawn and ctx.Err() returned.
func (b *batcher) do(ctx context.Context, c *call) error {
	b.mu.Lock()
	if b.inflight < b.max {
		b.inflight++
		batch := append(b.queue, c)
		b.queue = nil
		b.mu.Unlock()
		b.lead(c, batch)
		return nil
	}
	b.queue = append(b.queue, c)
	b.mu.Unlock()

	select {
	case batch := <-c.ch:
		if batch != nil {
			b.lead(c, batch)
		}
		return nil
	case <-ctx.Done():
	}
	b.mu.Lock()
	for i, q := range b.queue {
		if q == c {
			b.queue = append(b.queue[:i], b.queue[i+1:]...)
			b.mu.Unlock()
			return ctx.Err()
		}
	}
	b.mu.Unlock()
	// Already taken into a pipeline: its deadline bounds this wait.
	if batch := <-c.ch; batch != nil {
		b.lead(c, batch)
	}
	return nil
}

// lead runs batch (which holds self), passes the queue on to its first
// caller or gives back the pipeline slot, and signals every other call.
func (b *batcher) lead(self *call, batch []*call) {
	b.run(batch)
	b.mu.Lock()
	next := b.queue
	b.queue = nil
	if len(next) == 0 {
		b.inflight--
	}
	b.mu.Unlock()
	if len(next) > 0 {
		next[0].ch <- next
	}
	for _, c := range batch {
		if c != self {
			c.ch <- nil
		}
	}
}
