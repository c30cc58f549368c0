package redisstore

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// lane is the way to one Redis node: its circuit breaker and its batches.
type lane struct {
	name    string
	breaker *gobreaker.TwoStepCircuitBreaker[struct{}]
	batch   *batcher      // nil when batching is disabled
	conns   chan struct{} // unbatched: one token per pooled connection
	// lastFail is when (ns since Store.epoch) the last round-trip failure
	// that counted for the breaker was seen.
	lastFail atomic.Int64
}

// newLane returns a lane named name with its own breaker and batcher.
func (s *Store) newLane(name string) *lane {
	cfg := s.cfg
	ln := &lane{name: name}
	failures := uint32(cfg.Breaker.Failures)
	ln.breaker = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        name,
		MaxRequests: 1,
		Timeout:     cfg.Breaker.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		// A caller that gave up says nothing about Redis; neither does a
		// decision that waited too long in our own queue, nor an error
		// Redis answered for this script and these arguments (it fails
		// the same way on a healthy server, and must not open the breaker
		// for every other tenant).
		IsExcluded: func(err error) bool {
			if err == nil {
				return false // the common case: no allocation
			}
			var sf *sharedFailure
			return errors.Is(err, context.Canceled) || isScriptError(err) ||
				errors.Is(err, ErrOverloaded) || errors.As(err, &sf)
		},
		OnStateChange: s.breakerChanged,
	})
	if cfg.Batch.Disabled {
		ln.conns = make(chan struct{}, poolSize(cfg))
	} else {
		ln.batch = newBatcher(cfg.Batch, cfg.QueueTimeout, cfg.Timeout,
			func(batch []*call) (time.Duration, bool) { return s.runPipeline(ln, batch) })
	}
	return ln
}

// countFailure reports whether a round trip sent at sent (ns since epoch)
// that failed at now counts for the breaker: only when it was sent after
// the last counted failure was seen. Pipelines in flight together when
// Redis (or this process) stalls fail together, for one cause; counting
// each would open the breaker on one hiccup. Consecutive counted failures
// are round trips that each began after the previous one had failed.
func (ln *lane) countFailure(sent, now int64) bool {
	for {
		last := ln.lastFail.Load()
		if sent <= last {
			return false
		}
		if ln.lastFail.CompareAndSwap(last, now) {
			return true
		}
	}
}

func (s *Store) breakerChanged(name string, from, to gobreaker.State) {
	f, t := breakerState(from), breakerState(to)
	if s.opts.Logger != nil {
		s.opts.Logger.Info("redisstore: circuit breaker", "node", name, "from", f.String(), "to", t.String())
	}
	s.breakerMu.Lock()
	before := worstBreaker(s.breakers)
	s.breakers[name] = t
	after := worstBreaker(s.breakers)
	s.breakerMu.Unlock()
	if s.opts.OnBreakerChange != nil && after != before {
		s.opts.OnBreakerChange(before, after)
	}
}

// worstBreaker is the store's breaker state from its lanes': open when one
// is open, half-open when one is, closed otherwise.
func worstBreaker(states map[string]BreakerState) BreakerState {
	w := BreakerClosed
	for _, st := range states {
		if st == BreakerOpen {
			return BreakerOpen
		}
		if st == BreakerHalfOpen {
			w = BreakerHalfOpen
		}
	}
	return w
}

// BreakerState returns the circuit breaker's state now; on a cluster,
// where each master has its own, the worst of them (NodeBreakers says
// which).
func (s *Store) BreakerState() BreakerState {
	nodes := s.NodeBreakers()
	return worstBreaker(nodes)
}

// NodeBreakers returns each lane's breaker state now, by name: "redis"
// for a single node or Sentinel (and, on a cluster, for keys whose master
// was unknown), a master's address on a cluster.
func (s *Store) NodeBreakers() map[string]BreakerState {
	m := map[string]BreakerState{s.main.name: breakerState(s.main.breaker.State())}
	s.lanesMu.RLock()
	lanes := make([]*lane, 0, len(s.lanes))
	for _, ln := range s.lanes {
		lanes = append(lanes, ln)
	}
	s.lanesMu.RUnlock()
	for _, ln := range lanes {
		m[ln.name] = breakerState(ln.breaker.State())
	}
	return m
}

// laneFor returns the lane of key: the main one, or on a cluster its
// master's, so that a slow master opens its own breaker and fills its own
// batches while the others' tenants keep being decided by Redis.
func (s *Store) laneFor(ctx context.Context, key string) *lane {
	if s.cluster == nil {
		return s.main
	}
	// Only the cluster's first state load goes to the network; bound it.
	ctx, cancel := context.WithTimeout(ctx, lateFactor*s.cfg.Timeout)
	node, err := s.cluster.MasterForKey(ctx, key)
	cancel()
	if err != nil {
		return s.main
	}
	return s.laneOf(node.Options().Addr)
}

// laneOf returns the lane of the master at addr, made on first use.
func (s *Store) laneOf(addr string) *lane {
	s.lanesMu.RLock()
	ln := s.lanes[addr]
	s.lanesMu.RUnlock()
	if ln != nil {
		return ln
	}
	s.lanesMu.Lock()
	defer s.lanesMu.Unlock()
	if ln = s.lanes[addr]; ln == nil {
		ln = s.newLane(addr)
		s.lanes[addr] = ln
	}
	return ln
}
