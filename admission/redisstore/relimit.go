package redisstore

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// relimitPipeline is how many relimit calls (one per tenant) share a
// pipeline.
const relimitPipeline = 512

// Relimit tells the store that a reload gave the buckets in limits new
// limits, so that the change refills none of them.
//
// A key expires when its bucket is full at the rate its last take passed,
// and a missing key is a full bucket. After a reload that lowered a rate
// (or raised a burst), a bucket emptied just before it would vanish at the
// instant it is full under the old limit and come back full, although
// under the new one it is still partly empty. Relimit moves the expiry of
// every existing key in limits to the instant it is full under its new
// limit, when that is later (relimit.lua); the tokens do not change. The
// scripts never move an expiry earlier, so a take still in flight under
// the old limit cannot undo it. Keys of buckets whose limit did not change
// need nothing: pass only the changed ones (admission's Gate.Reload passes
// those whose rate went down or burst up, or that it did not know before).
//
// It runs off the hot path, on ctx's deadline and not Config.Timeout nor
// the breaker: one script call per tenant (its keys share a slot),
// pipelined. Under the Local policy it also relimits this instance's
// embedded buckets. Sync mode needs nothing more: its local views are
// keyed by limit and refresh from Redis when it changes. Nor do fixed
// windows, which are skipped: a window's key expires at its end, which no
// limit moves.
func (s *Store) Relimit(ctx context.Context, limits map[ratelimit.BucketKey]ratelimit.Limit) error {
	if len(limits) == 0 {
		return nil
	}
	if s.closed.Load() {
		return ErrClosed
	}
	calls, err := relimitCalls(limits)
	if err != nil {
		return err
	}
	if len(calls) == 0 {
		return nil // windows only: their keys need nothing
	}
	if s.local != nil {
		s.local.Relimit(func(k ratelimit.BucketKey) (ratelimit.Limit, bool) {
			l, ok := limits[k]
			// The largest share a take of any cost can get (localShare
			// raises the burst to the cost): keeping a bucket longer
			// than needed costs memory, forgetting it early refills it.
			return localShare(l, l.Burst, s.Instances()), ok
		})
	}
	if err := relimitScript.Load(ctx, s.client).Err(); err != nil {
		return fmt.Errorf("redisstore: relimit: %w", err)
	}
	for chunk := range slices.Chunk(calls, relimitPipeline) {
		if err := s.relimitPipelined(ctx, chunk); err != nil {
			return fmt.Errorf("redisstore: relimit: %w", err)
		}
	}
	return nil
}

// relimitCall is relimit.lua's call for one tenant's buckets.
type relimitCall struct {
	keys []string
	args []any // rate, burst per key
}

// relimitCalls groups limits by tenant, one call each, in a stable order.
// A limit that is not positive and finite is ErrInvalidTake. Fixed
// windows are left out: a window's key expires at the window's end, which
// no limit moves, and relimit.lua reads buckets.
func relimitCalls(limits map[ratelimit.BucketKey]ratelimit.Limit) ([]relimitCall, error) {
	keys := slices.SortedFunc(maps.Keys(limits), func(a, b ratelimit.BucketKey) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Scope, b.Scope))
	})
	var calls []relimitCall
	tenant := ""
	for _, k := range keys {
		l := limits[k]
		if !validTake(l, 1) {
			return nil, fmt.Errorf("%w: %v: rate %v, burst %v, end %v", ErrInvalidTake, k, l.Rate, l.Burst, l.End)
		}
		if l.Fixed() {
			continue
		}
		if len(calls) == 0 || k.Tenant != tenant {
			calls, tenant = append(calls, relimitCall{}), k.Tenant
		}
		c := &calls[len(calls)-1]
		c.keys = append(c.keys, bucketKey(k))
		c.args = append(c.args, l.Rate, l.Burst)
	}
	return calls, nil
}

// relimitPipelined runs calls in one pipeline with EVALSHA, and again with
// EVAL those that met NOSCRIPT (a node restarted or flushed since Load).
func (s *Store) relimitPipelined(ctx context.Context, calls []relimitCall) error {
	cmds, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range calls {
			relimitScript.EvalSha(ctx, p, c.keys, c.args...)
		}
		return nil
	})
	if err == nil {
		return nil
	}
	for i, cmd := range cmds {
		err := cmd.Err()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			err = relimitScript.Eval(ctx, s.client, calls[i].keys, calls[i].args...).Err()
		}
		if err != nil {
			return err
		}
	}
	return nil
}
