package redisstore

import (
	"errors"
	"fmt"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// FailurePolicy says what a decision is while Redis cannot answer (an error,
// a missed deadline, or the breaker open). The zero value is Local.
type FailurePolicy uint8

const (
	// Local decides on an embedded per-instance store with every quota
	// divided by Config.Instances: the fleet admits about what Redis would,
	// without coordination. The default.
	Local FailurePolicy = iota
	// FailOpen admits every request: availability over limits.
	FailOpen
	// FailClosed rejects every request with an *UnavailableError (a 503
	// with Retry-After): limits over availability.
	FailClosed
)

// String returns the config word for p.
func (p FailurePolicy) String() string {
	switch p {
	case Local:
		return "local"
	case FailOpen:
		return "fail_open"
	case FailClosed:
		return "fail_closed"
	default:
		return fmt.Sprintf("FailurePolicy(%d)", uint8(p))
	}
}

// MarshalText returns the config word for p.
func (p FailurePolicy) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText parses "local", "fail_open" or "fail_closed" (empty means
// local) and rejects anything else, so a typo fails at load time. As for
// each of the package's words, the error names no package: the decoder
// puts the field's path in the file before it.
func (p *FailurePolicy) UnmarshalText(b []byte) error {
	switch string(b) {
	case "local", "":
		*p = Local
	case "fail_open":
		*p = FailOpen
	case "fail_closed":
		*p = FailClosed
	default:
		return fmt.Errorf("unknown failure_policy %q (want local, fail_open or fail_closed)", b)
	}
	return nil
}

// Mode says how decisions use Redis. The zero value is Exact.
type Mode uint8

const (
	// Exact decides every take with a script call on Redis (batched),
	// so the fleet admits exactly what one bucket would. The default.
	Exact Mode = iota
	// Sync decides locally, at in-process speed, from this instance's
	// share of each bucket as last seen in Redis, and reconciles with
	// Redis every Config.SyncInterval: it pushes what it admitted and
	// pulls the fleet's total. The fleet admits at most Instances ×
	// (rate × SyncInterval + cost) beyond what Exact would, per bucket.
	// (The fair global backstop has its own mode: BackstopMode.)
	Sync
)

// String returns the config word for m.
func (m Mode) String() string {
	switch m {
	case Exact:
		return "exact"
	case Sync:
		return "sync"
	default:
		return fmt.Sprintf("Mode(%d)", uint8(m))
	}
}

// MarshalText returns the config word for m.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText parses "exact" or "sync" (empty means exact) and rejects
// anything else, so a typo fails at load time.
func (m *Mode) UnmarshalText(b []byte) error {
	switch string(b) {
	case "exact", "":
		*m = Exact
	case "sync":
		*m = Sync
	default:
		return fmt.Errorf("unknown mode %q (want exact or sync)", b)
	}
	return nil
}

// BackstopMode says how the store keeps the fair global backstop
// (TakeBackstop), whatever the buckets' Mode. The zero value is
// BackstopSync.
type BackstopMode uint8

const (
	// BackstopSync spreads the backstop over shards, one per master (one
	// on a single node), decides in process and reconciles every
	// Config.SyncInterval (see syncBackstop): no key is touched by every
	// request, a stopped master stales only its shard, and the fleet
	// admits at most what the shards' bound says beyond one exact bucket.
	// The default, in both modes.
	BackstopSync BackstopMode = iota
	// BackstopExact keeps it in one Redis hash decided by one script call
	// per request: exact, but every request touches that key (and its
	// master).
	BackstopExact
)

// String returns the config word for m: Mode's, for the same meaning.
func (m BackstopMode) String() string {
	switch m {
	case BackstopSync:
		return Sync.String()
	case BackstopExact:
		return Exact.String()
	}
	return fmt.Sprintf("BackstopMode(%d)", uint8(m))
}

// MarshalText returns the config word for m.
func (m BackstopMode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }

// UnmarshalText parses Mode's words, "sync" or "exact" (empty means sync
// here), and rejects anything else.
func (m *BackstopMode) UnmarshalText(b []byte) error {
	var mode Mode
	if err := mode.UnmarshalText(b); err != nil {
		return fmt.Errorf("unknown backstop_mode %q (want sync or exact)", b)
	}
	*m = BackstopSync
	if mode == Exact && len(b) > 0 {
		*m = BackstopExact
	}
	return nil
}

// Source says where a decision came from.
type Source uint8

const (
	// FromRedis is a decision made by the script in Redis.
	FromRedis Source = iota
	// FromDenyCache is a denial repeated from the denial cache, without a
	// Redis call.
	FromDenyCache
	// FromPolicy is a decision made by the failure policy because Redis
	// could not answer; Decide's Outcome names the policy and the cause.
	FromPolicy
	// FromSync is a decision made locally in sync mode, from this
	// instance's share of the bucket as last reconciled with Redis.
	FromSync
)

// String returns a metric label for s.
func (s Source) String() string {
	switch s {
	case FromRedis:
		return "redis"
	case FromDenyCache:
		return "deny_cache"
	case FromPolicy:
		return "policy"
	case FromSync:
		return "sync"
	default:
		return fmt.Sprintf("Source(%d)", uint8(s))
	}
}

// Outcome tells the caller how a decision was made.
type Outcome struct {
	// Source is where the decision came from.
	Source Source
	// Policy is the failure policy applied; meaningful when Source is
	// FromPolicy.
	Policy FailurePolicy
	// Cause is why Redis was not asked or did not answer (a timeout, a
	// connection error, ErrBreakerOpen); nil unless Source is FromPolicy.
	Cause error
}

var (
	// ErrUnavailable is matched (errors.Is) by the error of a decision
	// rejected under FailClosed. The admission pipeline maps it to 503 with
	// Retry-After; errors.As with *UnavailableError gives the delay.
	ErrUnavailable = errors.New("redisstore: rate store unavailable")
	// ErrBreakerOpen is the Cause of a policy decision made because the
	// circuit breaker is open (or half-open and busy probing).
	ErrBreakerOpen = errors.New("redisstore: circuit breaker open")
	// ErrOverloaded is the Cause of a policy decision made because the
	// decision waited in this instance's own queue for longer than
	// Config.QueueTimeout: the rate layer is overloaded (more decisions
	// than the Redis connections carry), whether or not Redis is healthy.
	// It never counts towards the breaker.
	ErrOverloaded = errors.New("redisstore: rate layer overloaded: decision queued past queue_timeout")
	// ErrInvalidTake is returned for a take whose limit or cost is not
	// a positive finite number. Config validation makes it impossible; the
	// Store checks anyway so a bug cannot write NaN into shared state.
	// It wraps ratelimit.ErrInvalidTake.
	ErrInvalidTake = fmt.Errorf("redisstore: %w", ratelimit.ErrInvalidTake)
	// ErrClosed is returned by decisions made after Close.
	ErrClosed = errors.New("redisstore: store closed")
	// errBadReply is wrapped by reply decoding failures.
	errBadReply = errors.New("redisstore: unexpected script reply")
)

// UnavailableError is the error of a decision rejected under FailClosed.
// It matches ErrUnavailable and unwraps to the cause.
type UnavailableError struct {
	// RetryAfter is how long a client should wait: the breaker's OpenFor.
	RetryAfter time.Duration
	// Cause is why Redis could not decide.
	Cause error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("%v (retry after %v): %v", ErrUnavailable, e.RetryAfter, e.Cause)
}

// RetryAfterHint tells the admission pipeline what Retry-After to give.
func (e *UnavailableError) RetryAfterHint() time.Duration { return e.RetryAfter }

// Is reports whether target is ErrUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Cause }
