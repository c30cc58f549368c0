package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

//go:embed settle.lua
var settleLua string

// settleScript runs settle.lua.
var settleScript = redis.NewScript(bucketLua + settleLua)

// SettleDedupeTTL is how long the Redis store remembers a settlement's id:
// a retry of a Settle within it changes nothing, one after it applies
// again. A retry follows a failed call within the caller's deadline, a
// few Timeouts; the TTL is far longer, so that a reply lost in a
// failover, or a caller that retries from a queue, is still covered.
const SettleDedupeTTL = 5 * time.Minute

// settleSuffix follows a tenant's key prefix ("fg:{<tag>}:") in a
// settlement's dedupe key, before the id's hash. A bucket key's scope is
// plain (no '$') or '#' and hex, so no bucket or window key starts so,
// and the hash tag, hence the slot, is the tenant's.
const settleSuffix = "$settle:"

// settleKey returns the dedupe key of the settlement id of tenant's
// buckets: the first 128 bits of SHA-256(id) in hex, so that any id is
// safe and short.
func settleKey(tenant, id string) string {
	var buf [maxKey + len(settleSuffix) + 32]byte
	b := appendKey(buf[:0], ratelimit.BucketKey{Tenant: tenant})
	return string(appendHash128(append(b, settleSuffix...), id))
}

// Settle implements ratelimit.Settler: one script call (settle.lua)
// charges or refunds every take, and records id under a key in the
// tenant's slot for SettleDedupeTTL, so a retry of the same id, as after
// a reply lost to a timeout although Redis applied the call, changes
// nothing. The call goes through the lanes, batches, breaker and
// deadlines of a take, so it fares as one under load and failure, but
// not through the denial cache (a denial it may make stale is one the
// cache holds no longer than that denial's RetryAfter).
//
// A bucket decided in sync mode is settled in process, as one more take
// (a refund as a take given back): the next reconciliation pushes it to
// Redis with the takes of the same interval, so no settlement costs a
// Redis call that sync mode saves on its takes, and none meets the
// bucket in Redis before the reservation it settles. Applied to Redis
// directly, a refund could arrive before its reservation's push, find
// the bucket full and be lost. The push is debited as any other, within
// sync mode's debt cap (see syncer.debtCap, at least two bursts) rather
// than −Burst, and the total stays what the requests used. The views are
// settled only once the exact buckets' call succeeded, so a retry after
// an error settles them once; nothing records id for them in process,
// and a Settle repeated after it succeeded settles them again.
//
// A Settle whose costs are all zero changes and asks nothing. The error
// is ErrInvalidTake or ratelimit.ErrDuplicateBucket for takes that are
// no valid settlement (see ratelimit.Settler), ErrClosed, ctx.Err()
// (returned as is when the caller's context ends first), or why Redis did
// not answer (ErrBreakerOpen, ErrOverloaded, Redis's error or timeout):
// then the settlement may or may not have been applied, and a retry with
// the same id applies it at most once. No failure policy applies.
func (s *Store) Settle(ctx context.Context, id string, takes []ratelimit.Take) error {
	_, _, err := s.settle(ctx, id, takes)
	return err
}

// settle is Settle that also reports whether it applied anything (false
// for a retry that Redis had applied, or for costs all zero) and the
// Redis clock the script read (µs; 0 without a call).
func (s *Store) settle(ctx context.Context, id string, takes []ratelimit.Take) (bool, int64, error) {
	if err := ratelimit.CheckSettlement(id, takes, ErrInvalidTake); err != nil {
		return false, 0, err
	}
	if s.closed.Load() {
		return false, 0, ErrClosed
	}
	exact, synced := takes, false
	if slices.ContainsFunc(takes, s.synced) {
		exact, synced = nil, true
		for _, t := range takes {
			if !s.synced(t) {
				exact = append(exact, t)
			}
		}
	}
	applied, now := false, int64(0)
	if slices.ContainsFunc(exact, charges) {
		keys, args := settleCall(id, exact)
		v, err := s.run(ctx, s.laneFor(ctx, keys[0]), settleScript, keys, args...)
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return false, 0, ctxErr
			}
			return false, 0, err
		}
		if applied, now, err = decodeSettle(v); err != nil {
			return false, 0, err
		}
	}
	if synced && s.syncer.settle(takes, s.synced) {
		applied = true
	}
	return applied, now, nil
}

// charges reports whether t changes its bucket: a cost other than zero.
func charges(t ratelimit.Take) bool { return t.Cost != 0 }

// settle adds the costs of takes that are synced (a charge, or a refund
// below zero) to their views' takes, making the views that are missing,
// so that the next reconciliation pushes them, and reports whether it
// changed one.
func (y *syncer) settle(takes []ratelimit.Take, synced func(ratelimit.Take) bool) bool {
	sh := &y.shards[y.shard(takes[0].Key)]
	now := y.clock()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	changed := false
	for _, t := range takes {
		if !synced(t) || t.Cost == 0 {
			continue
		}
		v := sh.m[t.Key]
		if v == nil {
			v = &syncView{l: t.Limit, lastUse: now}
			sh.m[t.Key] = v
		}
		v.taken += t.Cost
		changed = true
	}
	return changed
}

// settleCall returns settle.lua's keys and arguments for the settlement
// id of takes: the dedupe key and its TTL (ms), then per take its
// bucket's key or its window's, and the window's end (µs; 0 for a
// bucket), rate, burst and cost.
func settleCall(id string, takes []ratelimit.Take) ([]string, []any) {
	keys := make([]string, 1, 1+len(takes))
	keys[0] = settleKey(takes[0].Key.Tenant, id)
	args := make([]any, 1, 1+4*len(takes))
	args[0] = SettleDedupeTTL.Milliseconds()
	for _, t := range takes {
		var end int64
		if t.Limit.Fixed() {
			end = endMicros(t.Limit.End)
			keys = append(keys, windowKey(t.Key))
		} else {
			keys = append(keys, bucketKey(t.Key))
		}
		args = append(args, end, t.Limit.Rate, t.Limit.Burst, t.Cost)
	}
	return keys, args
}

// decodeSettle checks the shape of settle.lua's reply, {1 or 0, µs}, and
// returns whether the settlement was applied and the Redis clock.
func decodeSettle(v any) (bool, int64, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return false, 0, fmt.Errorf("%w: settle: %T %v, want a 2-element array", errBadReply, v, v)
	}
	applied, ok1 := a[0].(int64)
	now, ok2 := a[1].(int64)
	if !ok1 || !ok2 || (applied != 0 && applied != 1) {
		return false, 0, fmt.Errorf("%w: settle: %v, want {0 or 1, µs}", errBadReply, a)
	}
	return applied == 1, now, nil
}

var _ ratelimit.Settler = (*Store)(nil)
