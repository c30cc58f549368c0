package redisstore

import (
	"fmt"

	"github.com/sony/gobreaker/v2"
)

// BreakerState is the circuit breaker's state.
type BreakerState uint8

const (
	// BreakerClosed: Redis is asked.
	BreakerClosed BreakerState = iota
	// BreakerHalfOpen: one probe is asked; other takes use the policy.
	BreakerHalfOpen
	// BreakerOpen: Redis is not asked; every take uses the policy.
	BreakerOpen
)

// String returns a metric label for s.
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerHalfOpen:
		return "half_open"
	case BreakerOpen:
		return "open"
	default:
		return fmt.Sprintf("BreakerState(%d)", uint8(s))
	}
}

func breakerState(s gobreaker.State) BreakerState {
	switch s {
	case gobreaker.StateHalfOpen:
		return BreakerHalfOpen
	case gobreaker.StateOpen:
		return BreakerOpen
	default:
		return BreakerClosed
	}
}
