package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

//go:embed peek.lua
var peekLua string

// peekScript runs peek.lua.
var peekScript = redis.NewScript(bucketLua + peekLua)

// Peek reads the buckets and fixed windows of takes without charging
// them: res[i] (res is at least as long as takes) is what a take of
// takes[i].Cost alone would be told now (Allowed when its bucket holds
// the cost, Remaining, RetryAfter and ResetAfter as for a take), and
// nothing is written: a bucket never seen stays unwritten, and no key's
// TTL moves. The takes must be of one tenant, as for TakeAll (one script
// call, one hash slot on a cluster); a cost may be zero, and a bucket may
// be named twice.
//
// The read goes through the lanes, batches, breaker and deadlines of a
// take, so that it fares as a take under load and failure, but not
// through the denial cache, whose results are a past take's. A bucket
// decided in sync mode is read from this instance's view while the view
// is fresh (reconciled within two intervals), as its takes see it: the
// fleet's tokens at the last reconciliation, refilled, less what this
// instance took since. Otherwise it is read from Redis, which lacks what
// the instances took since their last reconciliation: at most about one
// SyncInterval of their takes.
//
// The error is ErrInvalidTake, ErrClosed, ctx.Err() (returned as is when
// the caller's context ends first), or why Redis did not answer
// (ErrBreakerOpen, ErrOverloaded, Redis's error or timeout). No failure
// policy applies: what a read that could not be made means is the
// caller's to decide.
func (s *Store) Peek(ctx context.Context, takes []ratelimit.Take, res []ratelimit.Result) error {
	if err := checkPeeks(takes, res); err != nil {
		return err
	}
	if s.closed.Load() {
		return ErrClosed
	}
	exact, at, out := takes, []int(nil), res
	if slices.ContainsFunc(takes, s.synced) {
		if exact, at = s.peekViews(takes, res); len(exact) == 0 {
			return nil
		}
		out = make([]ratelimit.Result, len(exact))
	}
	if _, err := s.peekRedis(ctx, exact, out); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		return err
	}
	for j, i := range at {
		res[i] = out[j]
	}
	return nil
}

// checkPeeks rejects an empty Peek, a res shorter than takes, a limit
// that is not valid (validLimit), a cost below zero or not finite, and
// takes of several tenants. Unlike a take, a peek may cost nothing (it
// asks whether a bucket holds anything) and may name a bucket twice (it
// writes nothing).
func checkPeeks(takes []ratelimit.Take, res []ratelimit.Result) error {
	switch {
	case len(takes) == 0:
		return fmt.Errorf("%w: no take", ErrInvalidTake)
	case len(res) < len(takes):
		return fmt.Errorf("%w: %d results for %d takes", ErrInvalidTake, len(res), len(takes))
	}
	for _, t := range takes {
		if !validLimit(t.Limit) || !(t.Cost == 0 || positiveFinite(t.Cost)) {
			return fmt.Errorf("%w: rate %v, burst %v, end %v, cost %v", ErrInvalidTake, t.Limit.Rate, t.Limit.Burst, t.Limit.End, t.Cost)
		}
		if t.Key.Tenant != takes[0].Key.Tenant {
			return fmt.Errorf("%w: one Peek reads one tenant's buckets (one hash slot)", ErrInvalidTake)
		}
	}
	return nil
}

// peekViews answers into res the takes of synced buckets whose views are
// fresh and of the take's limit, and returns the others, to be read on
// Redis, with their indices in takes.
func (s *Store) peekViews(takes []ratelimit.Take, res []ratelimit.Result) (rest []ratelimit.Take, at []int) {
	y := s.syncer
	sh := &y.shards[y.shard(takes[0].Key)]
	now := y.clock()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for i, t := range takes {
		if v := sh.m[t.Key]; s.synced(t) && v != nil && v.l == t.Limit && !v.stale(now, y.interval) {
			tokens := v.fleet(now, y.interval)
			res[i] = bucketResult(t, tokens, tokens >= t.Cost)
			continue
		}
		rest, at = append(rest, t), append(at, i)
	}
	return rest, at
}

// peekRedis runs peek.lua on takes and writes their results into res. It
// returns the Redis clock the script read (µs).
func (s *Store) peekRedis(ctx context.Context, takes []ratelimit.Take, res []ratelimit.Result) (int64, error) {
	keys := make([]string, len(takes))
	args := make([]any, 0, 3*len(takes))
	for i, t := range takes {
		var end int64
		if t.Limit.Fixed() {
			keys[i], end = windowKey(t.Key), endMicros(t.Limit.End)
		} else {
			keys[i] = bucketKey(t.Key)
		}
		args = append(args, end, t.Limit.Rate, t.Limit.Burst)
	}
	v, err := s.run(ctx, s.laneFor(ctx, keys[0]), peekScript, keys, args...)
	if err != nil {
		return 0, err
	}
	return decodePeek(v, takes, res)
}

// decodePeek checks the shape of peek.lua's reply to takes, {a
// little-endian double per take (two for a window), µs}, and derives each
// take's Result on its own, as the embedded store's arithmetic would for
// a take of its cost at that instant. It returns the Redis clock the
// script read (µs).
func decodePeek(v any, takes []ratelimit.Take, res []ratelimit.Result) (int64, error) {
	n := len(takes)
	a, ok := v.([]any)
	if !ok || len(a) != n+1 {
		return 0, fmt.Errorf("%w: peek: %T %v, want a %d-element array", errBadReply, v, v, n+1)
	}
	now, ok := a[n].(int64)
	if !ok {
		return 0, fmt.Errorf("%w: peek: now = %T, want an integer", errBadReply, a[n])
	}
	for i, t := range takes {
		if t.Limit.Fixed() {
			// Decoded as refused: RetryAfter is then set when the window
			// lacks the cost, which is when it is refused.
			r, err := decodeWindow(a[i], t.Cost, false, now)
			if err != nil {
				return 0, err
			}
			r.Allowed = r.Remaining >= t.Cost
			res[i] = r
			continue
		}
		tokens, err := decodeDouble(a[i])
		if err != nil {
			return 0, err
		}
		res[i] = bucketResult(t, tokens, tokens >= t.Cost)
	}
	return now, nil
}
