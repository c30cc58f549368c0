package bulkhead

import "errors"

var (
	// ErrQueueFull: no seat was free and the pool's queue was full, or a
	// queued request was pushed out by a request of a flow with fewer
	// requests queued. Maps to 503, reason queue_full.
	ErrQueueFull = errors.New("bulkhead: queue full")

	// ErrWaitTimeout: the request waited the pool's max_wait without
	// getting a seat. Maps to 503, reason wait_timeout.
	ErrWaitTimeout = errors.New("bulkhead: wait timeout")

	// ErrDraining: the pools are shutting down (Drain) and the request
	// found no free seat. Maps to 503, reason draining.
	ErrDraining = errors.New("bulkhead: draining")

	// ErrUnknownPool: Acquire named a pool that is not configured. A
	// wiring fault, not overload.
	ErrUnknownPool = errors.New("bulkhead: unknown pool")

	// ErrInvalidConfig is wrapped by every error of Config.Validate.
	ErrInvalidConfig = errors.New("bulkhead: invalid config")
)
