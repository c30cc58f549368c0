package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/fairshare"
)

//go:embed backstop.lua
var backstopLua string

//go:embed decay.lua
var decayLua string

// backstopKey is the fair global backstop's hash: the global tag, so one
// slot on a cluster.
const backstopKey = keyPrefix + globalTag + "}:fair"

// backstopScript runs backstop.lua, with decay.lua.
var backstopScript = redis.NewScript(decayLua + backstopLua)

// TakeBackstop decides one request r at the fair global backstop l. By
// default (BackstopSync) it is decided in process on this instance's part
// of the backstop's shards, reconciled every interval (see syncBackstop);
// with BackstopExact it is one script call on Redis within Timeout,
// through the breaker and the batches. While Redis cannot answer (synced:
// before the first reconciliation), the failure policy decides: FailOpen admits,
// FailClosed returns an *UnavailableError, Local decides on an embedded
// backstop of this instance's share of l.
func (s *Store) TakeBackstop(ctx context.Context, l fairshare.BackstopLimit, r fairshare.BackstopRequest) (fairshare.BackstopResult, error) {
	if !(r.Weight > 0) || !validTake(limitOf(l), r.Cost) || l.Window <= 0 {
		return fairshare.BackstopResult{}, fmt.Errorf("%w: backstop rate %v, burst %v, window %v, weight %v, cost %v", ErrInvalidTake, l.Rate, l.Burst, l.Window, r.Weight, r.Cost)
	}
	if s.closed.Load() {
		return fairshare.BackstopResult{}, ErrClosed
	}
	var res fairshare.BackstopResult
	var err error
	if s.cfg.BackstopMode == BackstopSync {
		res, err = s.syncer.syncedBackstop(ctx).take(ctx, l, r)
	} else {
		res, _, err = s.evalBackstop(ctx, l, r)
	}
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fairshare.BackstopResult{}, ctxErr
		}
		return s.backstopFallback(l, r, err)
	}
	if s.cfg.BackstopMode == BackstopExact {
		s.stats.redis.Add(1)
	}
	return res, nil
}

// evalBackstop runs the script once, batched with the takes, and decodes
// its reply; nowUS is the Redis clock it read.
func (s *Store) evalBackstop(ctx context.Context, l fairshare.BackstopLimit, r fairshare.BackstopRequest) (res fairshare.BackstopResult, nowUS int64, err error) {
	windowUS := l.Window.Microseconds()
	everyUS := (int64(l.Window)/fairshare.LevelEvery + 999) / 1000
	v, err := s.run(ctx, s.laneFor(ctx, backstopKey), backstopScript, []string{backstopKey},
		l.Rate, l.Burst, windowUS, everyUS, fairshare.ShareOf, r.Tenant, r.Weight, r.Cost, int(r.Class))
	if err != nil {
		return res, 0, err
	}
	return decodeBackstop(v)
}

// decodeBackstop checks the shape of backstop.lua's reply.
func decodeBackstop(v any) (fairshare.BackstopResult, int64, error) {
	var r fairshare.BackstopResult
	a, ok := v.([]any)
	if !ok || len(a) != 7 {
		return r, 0, fmt.Errorf("%w: backstop: %T %v, want a 7-element array", errBadReply, v, v)
	}
	flag := func(i int) (bool, error) {
		n, ok := a[i].(int64)
		if !ok || n != 0 && n != 1 {
			return false, fmt.Errorf("%w: backstop: [%d] = %T %v, want 0 or 1", errBadReply, i, a[i], a[i])
		}
		return n == 1, nil
	}
	num := func(i int) (float64, error) {
		s, ok := a[i].(string)
		if !ok {
			return 0, fmt.Errorf("%w: backstop: [%d] = %T, want a string", errBadReply, i, a[i])
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) {
			return 0, fmt.Errorf("%w: backstop: [%d] = %q", errBadReply, i, s)
		}
		return f, nil
	}
	var err error
	var retry float64
	if r.Allowed, err = flag(0); err != nil {
		return r, 0, err
	}
	if r.WithinShare, err = flag(1); err != nil {
		return r, 0, err
	}
	for i, p := range []*float64{&r.Use, &r.Share, &r.Tokens, &retry} {
		if *p, err = num(2 + i); err != nil {
			return r, 0, err
		}
	}
	now, ok := a[6].(int64)
	if !ok {
		return r, 0, fmt.Errorf("%w: backstop: now = %T, want an integer", errBadReply, a[6])
	}
	r.RetryAfter = time.Duration(math.Ceil(max(retry, 0) * 1e9))
	return r, now, nil
}

// backstopFallback decides by the failure policy because of cause.
func (s *Store) backstopFallback(l fairshare.BackstopLimit, r fairshare.BackstopRequest, cause error) (fairshare.BackstopResult, error) {
	p := s.cfg.FailurePolicy
	now := s.now()
	s.policyApplied(p, cause, now)
	switch p {
	case FailOpen:
		return fairshare.BackstopResult{Allowed: true, WithinShare: true, Tokens: l.Burst - r.Cost}, nil
	case FailClosed:
		return fairshare.BackstopResult{}, &UnavailableError{RetryAfter: s.cfg.Breaker.OpenFor, Cause: cause}
	}
	share := localShare(limitOf(l), r.Cost, s.Instances())
	l.Rate, l.Burst = share.Rate, share.Burst
	// The Local policy's embedded store keeps this instance's backstop too.
	return s.local.TakeBackstop(context.Background(), l, r)
}

// limitOf is l's bucket.
func limitOf(l fairshare.BackstopLimit) ratelimit.Limit {
	return ratelimit.Limit{Rate: l.Rate, Burst: l.Burst}
}

var _ ratelimit.BackstopStore = (*Store)(nil)

//go:embed backstopsettle.lua
var backstopSettleLua string

// backstopSettleScript runs backstopsettle.lua, with decay.lua.
var backstopSettleScript = redis.NewScript(decayLua + backstopSettleLua)

// SettleBackstop implements ratelimit.BackstopSettler. By default
// (BackstopSync) it is settled in process, as one more take of the
// interval (a refund as one given back), and pushed with the next
// reconciliation; with BackstopExact it is one script call
// (backstopsettle.lua) through the lanes, breaker and deadlines of a
// take. No failure policy applies: the error is ErrInvalidTake,
// ErrClosed, ctx.Err() or why Redis did not answer, and the reserve then
// stands. A settlement is not deduplicated: the gate settles a request
// once and never retries it.
func (s *Store) SettleBackstop(ctx context.Context, l fairshare.BackstopLimit, tenant string, cost float64) error {
	if !validTake(limitOf(l), 1) || l.Window <= 0 || math.IsNaN(cost) || math.IsInf(cost, 0) {
		return fmt.Errorf("%w: settle backstop: rate %v, burst %v, window %v, cost %v", ErrInvalidTake, l.Rate, l.Burst, l.Window, cost)
	}
	if s.closed.Load() {
		return ErrClosed
	}
	if cost == 0 {
		return nil
	}
	if s.cfg.BackstopMode == BackstopSync {
		s.syncer.syncedBackstop(ctx).settle(tenant, cost)
		return nil
	}
	_, err := s.run(ctx, s.laneFor(ctx, backstopKey), backstopSettleScript, []string{backstopKey},
		l.Rate, l.Burst, l.Window.Microseconds(), tenant, cost, fairshare.ShareOf)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

var _ ratelimit.BackstopSettler = (*Store)(nil)

//go:embed backstoprelimit.lua
var backstopRelimitLua string

// backstopRelimitScript runs backstoprelimit.lua.
var backstopRelimitScript = redis.NewScript(backstopRelimitLua)

// RelimitBackstop tells the store that a reload gave the global backstop
// the limit l (the window does not matter), so that the change does not
// refill it: as Relimit does for the tenants' buckets, it moves the
// backstop's expiry to the instant the bucket is full under l, when that
// is later. It runs off the hot path, on ctx's deadline. Under the Local
// policy this instance's embedded backstop needs nothing: it is never
// forgotten.
func (s *Store) RelimitBackstop(ctx context.Context, l fairshare.BackstopLimit) error {
	if !validTake(limitOf(l), 1) {
		return fmt.Errorf("%w: backstop rate %v, burst %v", ErrInvalidTake, l.Rate, l.Burst)
	}
	if s.closed.Load() {
		return ErrClosed
	}
	if s.cfg.BackstopMode == BackstopSync {
		// The synced backstop: each shard's part of the bucket, under
		// the part of the new limit.
		b := s.syncer.syncedBackstop(ctx)
		parts := float64(len(b.shards))
		for _, sh := range b.shards {
			if err := relimitScript.Run(ctx, s.client, []string{sh.bucket}, l.Rate/parts, l.Burst/parts).Err(); err != nil {
				return fmt.Errorf("redisstore: relimit backstop: %w", err)
			}
		}
		return nil
	}
	if err := backstopRelimitScript.Run(ctx, s.client, []string{backstopKey}, l.Rate, l.Burst).Err(); err != nil {
		return fmt.Errorf("redisstore: relimit backstop: %w", err)
	}
	return nil
}
