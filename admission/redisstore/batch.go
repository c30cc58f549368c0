package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// call is one script call on its way to Redis.
type call struct {
	script *redis.Script
	keys   []string
	args   []any
	queued time.Time // when the call joined the queue (for QueueTimeout)

	// Set by the batch's runner before the call is signalled.
	v       any   // the script's reply
	err     error // why there is no reply
	verdict error // what the breaker is told (see Store.run)

	// ch receives exactly one message: nil when v and err are set, or a
	// batch (holding this call) that this call's goroutine must now run.
	ch chan []*call
}

var callPool = sync.Pool{New: func() any { return &call{ch: make(chan []*call, 1)} }}

// getCall returns a pooled call for script on keys with args.
func getCall(script *redis.Script, keys []string, args ...any) *call {
	c := callPool.Get().(*call)
	c.script, c.keys, c.args = script, keys, args
	return c
}

// putCall clears c and returns it to the pool.
func putCall(c *call) {
	*c = call{ch: c.ch}
	callPool.Put(c)
}

// batcher shares round trips among concurrent decisions without a timer
// window and without a goroutine of its own. A caller that finds fewer
// pipelines in flight than the current limit runs one at once, on its own
// goroutine, holding itself. Otherwise it queues and waits. When a pipeline
// finishes, its runner hands the queue, as the next pipeline (up to
// maxBatch calls), to the first queued caller, and returns. So a lone
// caller pays one mutex more than a direct call, and under load each
// pipeline carries whatever arrived while the previous ones were in flight.
//
// Our queue is not Redis's health. A pipeline's round trip is bounded by
// the Store's Timeout from the instant it is sent, whatever its calls
// waited before; a call that waits in the queue longer than queueTimeout is
// failed with ErrOverloaded (the failure policy decides it, and the breaker
// does not count it). Completions come at least once per round-trip timeout
// while anything is in flight, and each one expires what waited too long,
// so no per-call timer is needed: a call is answered within queueTimeout
// plus one round-trip timeout.
//
// The depth adapts: when a finished pipeline leaves more queued than one
// pipeline carries and its round trip was quick (under slow), the limit of
// pipelines in flight (each on its own connection) grows by one, up to
// maxInFlight; when a round trip fails or is slow, Redis is absorbing no
// more and the limit halves, down to minInFlight. So the queue is drained
// by batching more, not by failing over.
type batcher struct {
	maxBatch     int
	minInFlight  int
	maxInFlight  int
	queueTimeout time.Duration
	slow         time.Duration
	// run sets v or err of every call in batch and reports the round
	// trip's duration and whether it failed as a whole.
	run func(batch []*call) (rtt time.Duration, failed bool)

	mu       sync.Mutex
	queue    []*call
	inflight int
	limit    int // pipelines allowed in flight now, in [minInFlight, maxInFlight]
}

// newBatcher returns a batcher running pipelines with run. cfg holds
// defaults; timeout is the round-trip timeout.
func newBatcher(cfg BatchConfig, queueTimeout, timeout time.Duration, run func([]*call) (time.Duration, bool)) *batcher {
	return &batcher{
		maxBatch:     cfg.MaxBatch,
		minInFlight:  min(cfg.MaxInFlight, minInFlight),
		maxInFlight:  cfg.MaxInFlight,
		queueTimeout: queueTimeout,
		slow:         timeout / 2,
		run:          run,
		limit:        min(cfg.MaxInFlight, minInFlight),
	}
}

// minInFlight is the least number of pipelines the batcher keeps in flight
// (unless MaxInFlight is lower): four, so that Redis has the next pipeline
// at hand while this process reads another's replies and wakes its
// callers, which on a busy machine takes longer than Redis takes for one
// pipeline. (With two, at 16 callers Redis waited: 1.00-1.15x redis_rate's
// decisions/s in one run, against 1.09-1.30x with four; bench/PERF.md.)
const minInFlight = 4

// do runs c, alone or batched, and returns once c.v or c.err is set. If
// ctx ends while c is still queued, c is withdrawn and ctx.Err() returned.
func (b *batcher) do(ctx context.Context, c *call) error {
	c.queued = time.Now()
	b.mu.Lock()
	if b.inflight < b.limit {
		b.inflight++
		b.mu.Unlock()
		b.lead(c, []*call{c})
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
	// Already taken into a pipeline (or expired): the round-trip timeout
	// bounds this wait.
	if batch := <-c.ch; batch != nil {
		b.lead(c, batch)
	}
	return nil
}

// lead runs batch (which holds self), adapts the depth, expires queued
// calls that waited too long, hands the queue on as one or more pipelines
// (this slot's first) or gives back the slot, and signals every other
// call.
func (b *batcher) lead(self *call, batch []*call) {
	rtt, failed := b.run(batch)
	now := time.Now()
	var next [][]*call
	b.mu.Lock()
	expired := b.expireLocked(now)
	switch {
	case failed || rtt >= b.slow:
		b.limit = max(b.minInFlight, b.limit/2)
	case len(b.queue) > b.maxBatch && b.limit < b.maxInFlight:
		b.limit++
	}
	for len(b.queue) > 0 && (len(next) == 0 || b.inflight < b.limit) {
		if len(next) > 0 {
			b.inflight++
		}
		n := min(len(b.queue), b.maxBatch)
		next = append(next, b.queue[:n:n])
		b.queue = b.queue[n:]
	}
	if len(b.queue) == 0 {
		b.queue = nil
	}
	if len(next) == 0 {
		b.inflight--
	}
	b.mu.Unlock()
	for _, c := range expired {
		c.err, c.verdict = ErrOverloaded, ErrOverloaded
		c.ch <- nil
	}
	for _, nb := range next {
		nb[0].ch <- nb
	}
	for _, c := range batch {
		if c != self {
			c.ch <- nil
		}
	}
}

// expireLocked removes from the queue the calls that have waited longer
// than queueTimeout and returns them. The queue is in arrival order, so
// they are a prefix. b.mu must be held.
func (b *batcher) expireLocked(now time.Time) []*call {
	n := 0
	for n < len(b.queue) && now.Sub(b.queue[n].queued) > b.queueTimeout {
		n++
	}
	if n == 0 {
		return nil
	}
	expired := b.queue[:n:n]
	b.queue = b.queue[n:]
	return expired
}

// depth returns the current limit of pipelines in flight, for tests.
func (b *batcher) depth() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.limit
}
