package ratelimit

import (
	"context"
	"errors"
	"time"
)

// Limit is a token bucket's quota: Rate tokens a second, up to Burst tokens;
// or, with End set, a fixed window's. The zero value admits nothing.
type Limit struct {
	// Rate is the refill rate in tokens per second. Must be > 0.
	Rate float64
	// Burst is the bucket's capacity in tokens. Must be > 0.
	Burst float64
	// End, when not zero, makes the bucket a fixed window: Burst tokens
	// for the window that ends at End (Unix ns, wall clock), none back
	// before then, and the next window starts full. The caller sets it
	// for each take from the window's Calendar (Calendar.Limit); Rate is
	// then the nominal rate, which only Window reads. A bucket is kept
	// apart from a window of the same key: a limit changed from one to
	// the other starts afresh.
	End int64
}

// Window returns the time l takes to refill a bucket from empty
// (Burst/Rate), rounded up to the nanosecond: for a fixed window, its
// nominal length.
func (l Limit) Window() time.Duration { return secondsToDuration(l.Burst / l.Rate) }

// Fixed reports whether l is a fixed window's.
func (l Limit) Fixed() bool { return l.End != 0 }

// BucketKey names one token bucket. Stores turn it into their own key; the
// Redis store hashes or escapes both fields, so any bytes are safe here.
type BucketKey struct {
	// Tenant is the tenant ID. Empty means the global backstop bucket.
	Tenant string
	// Scope is empty for the tenant's own bucket, or a route group's name.
	Scope string
}

// Result is a store's answer for one Take.
type Result struct {
	// Allowed is true when the cost was taken from the bucket.
	Allowed bool
	// Remaining is the number of tokens left after this take (when allowed)
	// or in the bucket now (when not). Never negative.
	Remaining float64
	// RetryAfter is, when not allowed, the time until the bucket holds the
	// cost. Zero when allowed.
	RetryAfter time.Duration
	// ResetAfter is the time until the bucket is full again.
	ResetAfter time.Duration
	// StateUnknown is true when the store decided without reading the
	// bucket (a failure policy that admits, a denial it remembered), or
	// from one instance's share of it (Redis sync mode or its Local
	// policy, with several instances: the share is neither the bucket's
	// tokens nor a bound on them, since the other instances' shares and
	// takes are not known here). Remaining and ResetAfter then say
	// nothing sure about the bucket, and a client must not be told them.
	StateUnknown bool
	// Uncharged is true when the store admitted without taking the cost
	// from the shared bucket: a failure policy that admits (fail_open),
	// or one that charged this instance's share in process (Redis's
	// local). What the request used is then not settled (Settler): a
	// refund would give back tokens the bucket never lost.
	Uncharged bool
}

// ErrInvalidTake is wrapped by a store's error for a take whose limit or
// cost is not a positive finite number. It is a bug or a config that
// validation should have refused, never an outage of the store: the rate
// layer answers it with a logged 500, not with the failure policy.
var ErrInvalidTake = errors.New("ratelimit: invalid limit or cost")

// Store keeps token buckets for the rate layer. The embedded MemoryStore and
// the Redis store satisfy it.
//
// Take removes cost tokens from bucket k (quota l) when it holds that many,
// and otherwise takes nothing. A bucket that was never seen (or expired)
// starts full. The error is for infrastructure faults only: an over-quota
// bucket is a Result with Allowed false, not an error. Implementations must
// be safe for concurrent use.
type Store interface {
	Take(ctx context.Context, k BucketKey, l Limit, cost float64) (Result, error)
}

// FleetStore is a Store that several gateway instances share, and that
// knows how many do: per-instance limits (a tenant's concurrency cap)
// divide by Instances. The Redis store satisfies it, counting the live
// instances; a Store that is not a FleetStore serves one instance.
type FleetStore interface {
	Store
	Instances() int
}

// Take is one bucket's part of a TakeAll: Cost tokens from bucket Key,
// whose quota is Limit.
type Take struct {
	Key   BucketKey
	Limit Limit
	Cost  float64
	// Mode is how a shared store decides this bucket (ModeStore: as it
	// is configured to); a store that decides every bucket in process
	// ignores it.
	Mode Mode
}

// Mode is how a shared store decides a take's bucket.
type Mode uint8

// The modes: the store's own, exact (the bucket in the store, asked per
// decision), or sync (decided in process, reconciled periodically).
const (
	ModeStore Mode = iota
	ModeExact
	ModeSync
)

// MultiStore takes from several buckets at once, all or nothing: the rate
// layer's one call for a request that several buckets limit (a route
// group's bucket and the tenant's, or several limits on one key: a
// per-second burst and a daily quota). The embedded MemoryStore and the
// Redis store (one Lua call) satisfy it.
//
// TakeAll takes each take's Cost from its bucket when every bucket holds
// its cost, and otherwise takes nothing from any. It returns one Result
// per take, in order. When every bucket had room, each Result is an
// admission (Remaining is what is left). Otherwise every Result has
// Allowed false and no bucket was charged: Remaining is the bucket's
// tokens, and RetryAfter the time until that bucket holds its own cost,
// zero for a bucket that has it already; the request may succeed after
// the longest RetryAfter. The same Key must not appear twice (give each
// limit of one key its own Scope): ErrDuplicateBucket. Takes of one
// tenant are what a store must support; the Redis store on a cluster
// requires it (one slot). The error is for infrastructure faults and
// invalid takes only.
type MultiStore interface {
	TakeAll(ctx context.Context, takes []Take) ([]Result, error)
}

// ErrDuplicateBucket is returned by TakeAll when one bucket appears in two
// takes.
var ErrDuplicateBucket = errors.New("ratelimit: the same bucket twice in one TakeAll")

// Duplicate reports whether two takes name the same bucket. Stores call it
// to reject such a TakeAll: each pair when the takes are few, else through
// a map, so its cost is linear in the takes.
func Duplicate(takes []Take) bool {
	if len(takes) > duplicateScan { // a scan of every pair would grow with the square
		seen := make(map[BucketKey]struct{}, len(takes))
		for _, t := range takes {
			if _, dup := seen[t.Key]; dup {
				return true
			}
			seen[t.Key] = struct{}{}
		}
		return false
	}
	for i := range takes {
		for j := i + 1; j < len(takes); j++ {
			if takes[i].Key == takes[j].Key {
				return true
			}
		}
	}
	return false
}

// duplicateScan is the most takes Duplicate compares pairwise: a request's
// few buckets cost less so than a map.
const duplicateScan = 16
