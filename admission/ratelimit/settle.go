package ratelimit

import (
	"context"
	"fmt"
	"math"
)

// Settler settles what requests really used against what they reserved:
// usage-based cost. A route reserves a cost at admission (a TakeAll, all
// or nothing), and when the upstream's answer says what the request used,
// the difference is charged or refunded in one store call. The embedded
// MemoryStore and the Redis store (one Lua call) satisfy it.
//
// Settle applies each take's Cost, the signed difference used − reserved
// for its bucket, unconditionally: a settlement is never refused, since
// the request it settles has been served. A positive Cost charges more
// and may take a bucket into debt: one settlement takes it at most one
// Burst below where it found it, or below zero when it found tokens
// (so it never lifts a bucket, and what one request used beyond its
// bucket's tokens and a burst is forgiven); requests in flight together
// each settle in full within that bound, so what they used is charged, and
// the debt is at most a burst per request settled while the bucket was in
// debt (the tenant's concurrency cap bounds them). The refill repays the
// debt first, and a take while in debt is refused with a RetryAfter that
// says when the bucket holds its cost again, the debt repaid. A negative
// Cost refunds, never above Burst. A bucket never seen is full before the
// settlement.
//
// For a fixed window (Limit.End set) Cost is added to the units used, by
// the same rule: a charge raises them to at most one Burst above the
// greater of Burst and what they were (a charge never lowers them), a
// refund never below 0, and only while the window's state is still of the
// take's window (its end is the take's End, and the window has not
// ended): a window that is over, or that was never seen, has its quota
// renewed, and there is nothing left to settle.
//
// id names the settlement, one per request, never empty. A store that a
// retry can reach twice (the Redis store, whose call may have been
// applied although its reply was lost) applies a settlement of one id at
// most once, within a window it documents; a Settle with a new id
// applies again. Each store documents whether it dedupes.
//
// The takes must be of one tenant and name distinct buckets
// (ErrDuplicateBucket), with valid limits and finite costs, and id must
// not be empty (ErrInvalidTake otherwise); a Cost of zero changes
// nothing, and so does a Settle of no takes. The error is for invalid
// takes and infrastructure faults: the caller logs it, and the
// reservation stands. A reservation that no bucket was charged for (a
// Redis store's failure policy admitted it) is not for settling: a
// refund would credit tokens that nobody took.
type Settler interface {
	Settle(ctx context.Context, id string, takes []Take) error
}

// CheckSettlement returns the error Settle returns for takes that are
// not a valid settlement (see Settler) of id, and nil for a valid one:
// one that wraps invalid, or ErrDuplicateBucket. Stores call it before
// settling; invalid is the store's sentinel, ErrInvalidTake or one that
// wraps it (a store's own, which names the store), so the error matches
// both.
func CheckSettlement(id string, takes []Take, invalid error) error {
	if id == "" {
		return fmt.Errorf("%w: settle: no id", invalid)
	}
	for _, t := range takes {
		l := t.Limit
		if !positiveFinite(l.Rate) || !positiveFinite(l.Burst) || l.End < 0 || math.IsNaN(t.Cost) || math.IsInf(t.Cost, 0) {
			return fmt.Errorf("%w: settle: rate %v, burst %v, end %v, cost %v", invalid, l.Rate, l.Burst, l.End, t.Cost)
		}
		if t.Key.Tenant != takes[0].Key.Tenant {
			return fmt.Errorf("%w: settle: one settlement is of one tenant's buckets", invalid)
		}
	}
	if Duplicate(takes) {
		return ErrDuplicateBucket
	}
	return nil
}

// positiveFinite reports whether x > 0 and finite (NaN is neither).
func positiveFinite(x float64) bool { return x > 0 && !math.IsInf(x, 0) }

// settle applies a settlement of cost (signed: a charge above zero, a
// refund below) to b under l at now, and returns the new state. A charge
// stops one Burst below the tokens held, or below zero when they are
// more; a refund at Burst. As for take, last never moves backwards.
func (b bucket) settle(l Limit, now int64, cost float64) bucket {
	tokens := b.tokensAt(l, now)
	next := tokens - cost
	if cost > 0 {
		next = math.Max(next, math.Min(tokens, 0)-l.Burst)
	} else {
		next = math.Min(next, l.Burst)
	}
	return bucket{tokens: next, last: max(now, b.last)}
}

// settleFixed applies a settlement of cost to window state b under l at
// wall (Unix ns), when b is of l's window and that has not ended; it
// reports whether it did. A charge raises the units used to at most
// Burst above the greater of Burst and what they were (as settle's
// floor, a window's used being Burst less a bucket's tokens); a refund
// lowers them to no less than 0.
func (b bucket) settleFixed(l Limit, wall int64, cost float64) (bucket, bool) {
	if b.last != l.End || wall >= l.End {
		return b, false
	}
	used := b.tokens + cost
	if cost > 0 {
		used = math.Min(used, math.Max(b.tokens, l.Burst)+l.Burst)
	} else {
		used = math.Max(used, 0)
	}
	return bucket{tokens: used, last: b.last}, true
}

// Settle implements Settler, at the store's clock (see SettleAt). The
// MemoryStore does not dedupe by id: its Settle fails only for invalid
// takes, which a retry would not mend, so within one process nothing
// settles a request twice, and remembering ids would cost memory and a
// lookup on every settlement for nothing. The error is CheckSettlement's.
func (s *MemoryStore) Settle(_ context.Context, id string, takes []Take) error {
	return s.SettleAt(s.Clock(), id, takes)
}

// SettleAt is Settle at the instant now on the store's clock (see Clock),
// under the one lock of the tenant's shard. A refund of a bucket never
// seen, or one that leaves a bucket as it was, stores nothing; a bucket
// that goes into debt is kept until it is full again, so it cannot be
// forgotten while it owes. It allocates nothing unless it creates a
// bucket.
func (s *MemoryStore) SettleAt(now int64, id string, takes []Take) error {
	if err := CheckSettlement(id, takes, ErrInvalidTake); err != nil || len(takes) == 0 {
		return err
	}
	_, sh := s.locate(takes[0].Key) // one tenant: one shard
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s.sweepDueLocked(sh, now)
	wall := s.wall(now)
	for _, t := range takes {
		if t.Cost == 0 {
			continue
		}
		h, _ := s.hash(t.Key)
		e := sh.getLocked(h, t.Key)
		if t.Limit.Fixed() {
			if e != nil && e.fixed {
				e.b, _ = e.b.settleFixed(t.Limit, wall, t.Cost)
			}
			continue
		}
		var b bucket
		if e != nil && !e.fixed {
			b = e.b
		} else {
			b = fullBucket(t.Limit, now)
		}
		next := b.settle(t.Limit, now, t.Cost)
		if next.tokens == b.tokensAt(t.Limit, now) {
			continue // unchanged: the stored state refills the same
		}
		e = sh.entryFor(h, e, t.Key, t.Limit, now)
		e.b = next
		e.fullAt = max(e.fullAt, next.fullAt(t.Limit))
	}
	return nil
}

var _ Settler = (*MemoryStore)(nil)
