package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// Take implements ratelimit.Store. Under FailClosed, a take Redis cannot
// answer returns an error matching ErrUnavailable; under the other policies
// Redis trouble is never an error. Decide also says how the take was
// decided.
func (s *Store) Take(ctx context.Context, k ratelimit.BucketKey, l ratelimit.Limit, cost float64) (ratelimit.Result, error) {
	r, _, err := s.Decide(ctx, k, l, cost)
	return r, err
}

// Decide is Take that also returns how the decision was made. The error is
// ErrInvalidTake, ErrClosed, ctx.Err() (returned as is when the caller's
// context ends first), or an *UnavailableError under FailClosed.
func (s *Store) Decide(ctx context.Context, k ratelimit.BucketKey, l ratelimit.Limit, cost float64) (ratelimit.Result, Outcome, error) {
	takes := [1]ratelimit.Take{{Key: k, Limit: l, Cost: cost}}
	var res [1]ratelimit.Result
	out, err := s.decide(ctx, takes[:], res[:])
	return res[0], out, err
}

// TakeAll implements ratelimit.MultiStore: one script call takes from
// every bucket or from none. The takes must be of one tenant (their keys
// share its hash tag, so one slot on a cluster) and name distinct buckets;
// otherwise the error matches ErrInvalidTake or
// ratelimit.ErrDuplicateBucket. Redis trouble is as for Take: the failure
// policy decides every take together (Local: all or nothing on this
// instance's shares).
func (s *Store) TakeAll(ctx context.Context, takes []ratelimit.Take) ([]ratelimit.Result, error) {
	res, _, err := s.DecideAll(ctx, takes)
	return res, err
}

// DecideAll is TakeAll that also returns how the decision was made.
func (s *Store) DecideAll(ctx context.Context, takes []ratelimit.Take) ([]ratelimit.Result, Outcome, error) {
	res := make([]ratelimit.Result, len(takes))
	out, err := s.decide(ctx, takes, res)
	if err != nil {
		return nil, out, err
	}
	return res, out, nil
}

// decide decides takes, all or nothing, into res (as long as takes):
// from the denial cache, from Redis, or by the failure policy.
func (s *Store) decide(ctx context.Context, takes []ratelimit.Take, res []ratelimit.Result) (Outcome, error) {
	if err := checkTakes(takes); err != nil {
		return Outcome{}, err
	}
	if s.closed.Load() {
		return Outcome{}, ErrClosed
	}
	synced := 0
	for _, t := range takes {
		if s.synced(t) {
			synced++
		}
	}
	switch synced {
	case len(takes):
		return s.syncer.decide(ctx, takes, res)
	case 0:
		return s.decideExact(ctx, takes, res)
	}
	return s.decideMixed(ctx, takes, res)
}

// synced reports whether t's bucket is decided in sync mode: its own
// mode, or else the store's. A fixed window never is: sync's shares and
// debt are a bucket's arithmetic, so it is decided exactly on Redis.
func (s *Store) synced(t ratelimit.Take) bool {
	if t.Limit.Fixed() {
		return false
	}
	switch t.Mode {
	case ratelimit.ModeExact:
		return false
	case ratelimit.ModeSync:
		return true
	}
	return s.cfg.Mode == Sync
}

// decideMixed decides takes of which some are synced and some exact
// (per-limit modes), all or nothing: the synced ones first, in process
// (refused there, Redis is not asked), then the exact ones on Redis; when
// those are refused or cannot be decided, the synced takes are given back.
func (s *Store) decideMixed(ctx context.Context, takes []ratelimit.Take, res []ratelimit.Result) (Outcome, error) {
	var synced, exact []ratelimit.Take
	var syncedAt, exactAt []int
	for i, t := range takes {
		if s.synced(t) {
			synced, syncedAt = append(synced, t), append(syncedAt, i)
		} else {
			exact, exactAt = append(exact, t), append(exactAt, i)
		}
	}
	sres, eres := make([]ratelimit.Result, len(synced)), make([]ratelimit.Result, len(exact))
	out, err := s.syncer.decide(ctx, synced, sres)
	if err != nil {
		return out, err
	}
	for j, i := range syncedAt {
		res[i] = sres[j]
	}
	if !sres[0].Allowed {
		for _, i := range exactAt {
			res[i] = ratelimit.Result{StateUnknown: true} // not asked
		}
		return out, nil
	}
	eout, err := s.decideExact(ctx, exact, eres)
	if err == nil && eres[0].Allowed {
		for j, i := range exactAt {
			res[i] = eres[j]
		}
		return eout, nil
	}
	if out.Source == FromSync {
		s.syncer.giveBack(synced)
	}
	if err != nil {
		return eout, err
	}
	for j, i := range exactAt {
		res[i] = eres[j]
	}
	for j, i := range syncedAt {
		res[i] = ratelimit.Result{Remaining: sres[j].Remaining + synced[j].Cost, StateUnknown: sres[j].StateUnknown}
	}
	return eout, nil
}

// giveBack returns takes, decided in process and then undone (an exact
// bucket of the same TakeAll refused): what they took is taken back, and
// the next push carries the difference (it may be negative: sync.lua
// credits it).
func (y *syncer) giveBack(takes []ratelimit.Take) {
	sh := &y.shards[y.shard(takes[0].Key)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, t := range takes {
		if v := sh.m[t.Key]; v != nil {
			v.taken -= t.Cost
		}
	}
}

// decideExact decides takes on Redis (or the denial cache, or the
// failure policy).
func (s *Store) decideExact(ctx context.Context, takes []ratelimit.Take, res []ratelimit.Result) (Outcome, error) {
	var dk denyKey
	lead := false
	if s.deny != nil {
		dk = denyKeyOf(takes)
		st, err := s.denied(ctx, dk, res)
		switch {
		case err != nil:
			return Outcome{}, err
		case st == denyHit:
			s.stats.denyCache.Add(1)
			return Outcome{Source: FromDenyCache}, nil
		}
		lead = st == denyLead
	}
	// Taken before the script runs, so start + RetryAfter is never later
	// than the refill the script computed: the denial cache must not deny
	// past it.
	start := s.now()
	_, err := s.evalTakes(ctx, takes, res)
	if err != nil {
		if lead {
			s.deny.settle(dk, nil, nil, false, start)
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return Outcome{}, ctxErr
		}
		return s.fallback(takes, res, err)
	}
	switch {
	case lead:
		s.deny.settle(dk, takes, res, true, start)
	case s.deny != nil:
		s.deny.put(dk, takes, res, start)
	}
	s.stats.redis.Add(1)
	return Outcome{Source: FromRedis}, nil
}

// checkTakes rejects an empty TakeAll, a limit or cost that is not a
// positive finite number, a window's end before the epoch, takes of
// several tenants, and a bucket twice.
func checkTakes(takes []ratelimit.Take) error {
	if len(takes) == 0 {
		return fmt.Errorf("%w: no take", ErrInvalidTake)
	}
	for _, t := range takes {
		if !validTake(t.Limit, t.Cost) {
			return fmt.Errorf("%w: rate %v, burst %v, end %v, cost %v", ErrInvalidTake, t.Limit.Rate, t.Limit.Burst, t.Limit.End, t.Cost)
		}
		if t.Key.Tenant != takes[0].Key.Tenant {
			return fmt.Errorf("%w: one TakeAll takes from one tenant's buckets (one hash slot)", ErrInvalidTake)
		}
	}
	if ratelimit.Duplicate(takes) {
		return ratelimit.ErrDuplicateBucket
	}
	return nil
}

// evalTakes runs the take script on takes (window.lua when one is a
// fixed window's) and writes the results into res. It returns the Redis
// clock the script read (µs).
func (s *Store) evalTakes(ctx context.Context, takes []ratelimit.Take, res []ratelimit.Result) (int64, error) {
	script, keys, args := takeCall(takes)
	v, err := s.run(ctx, s.laneFor(ctx, keys[0]), script, keys, args...)
	if err != nil {
		return 0, err
	}
	return decodeTake(v, takes, res)
}

// takeCall returns the script that decides takes, its keys and its
// arguments.
func takeCall(takes []ratelimit.Take) (*redis.Script, []string, []any) {
	if hasWindow(takes) {
		keys, args := windowCall(takes)
		return windowScript, keys, args
	}
	keys := make([]string, len(takes))
	args := make([]any, 0, 3*len(takes))
	for i, t := range takes {
		keys[i] = bucketKey(t.Key)
		args = append(args, t.Limit.Rate, t.Limit.Burst, t.Cost)
	}
	return takeScript, keys, args
}

// denied consults the denial cache for dk: a denial that holds (denyHit,
// with the results in res), none (denyMiss), or an expired one that this
// caller must refresh (denyLead, then settle). While another caller
// refreshes it, it waits for that answer, at most QueueTimeout (then it
// asks Redis itself); the error is ctx's when ctx ends first.
func (s *Store) denied(ctx context.Context, dk denyKey, res []ratelimit.Result) (denyState, error) {
	var bound <-chan time.Time
	for {
		st, wait := s.deny.get(dk, s.now(), res)
		if st != denyWait {
			return st, nil
		}
		if bound == nil {
			t := time.NewTimer(s.cfg.QueueTimeout)
			defer t.Stop()
			bound = t.C
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return denyMiss, ctx.Err()
		case <-bound:
			return denyMiss, nil
		}
	}
}

// denyKeyOf is the denial cache's key of takes: the first take, and the
// others encoded (length-prefixed, so no two lists encode alike).
func denyKeyOf(takes []ratelimit.Take) denyKey {
	t := takes[0]
	dk := denyKey{k: t.Key, l: t.Limit, cost: t.Cost}
	if len(takes) == 1 {
		return dk
	}
	var b []byte
	for _, t := range takes[1:] {
		b = binary.AppendUvarint(b, uint64(len(t.Key.Tenant)))
		b = append(b, t.Key.Tenant...)
		b = binary.AppendUvarint(b, uint64(len(t.Key.Scope)))
		b = append(b, t.Key.Scope...)
		for _, f := range []float64{t.Limit.Rate, t.Limit.Burst, t.Cost} {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
		}
		// A window's end too: a denial in one window says nothing of
		// the next.
		b = binary.LittleEndian.AppendUint64(b, uint64(t.Limit.End))
	}
	dk.rest = string(b)
	return dk
}

// fallback decides takes into res by the failure policy because of cause.
func (s *Store) fallback(takes []ratelimit.Take, res []ratelimit.Result, cause error) (Outcome, error) {
	p := s.cfg.FailurePolicy
	now := s.now()
	s.policyApplied(p, cause, now)
	out := Outcome{Source: FromPolicy, Policy: p, Cause: cause}
	switch p {
	case FailOpen:
		// Admitted without reading the buckets: their state is not known.
		for i := range takes {
			res[i] = ratelimit.Result{Allowed: true, StateUnknown: true, Uncharged: true}
		}
		return out, nil
	case FailClosed:
		return out, &UnavailableError{RetryAfter: s.cfg.Breaker.OpenFor, Cause: cause}
	}
	if len(takes) == 1 {
		t := takes[0]
		res[0] = s.local.TakeAt(s.local.Clock(), t.Key, localShare(t.Limit, t.Cost, s.Instances()), t.Cost)
	} else {
		shares := make([]ratelimit.Take, len(takes))
		for i, t := range takes {
			shares[i] = t
			shares[i].Limit = localShare(t.Limit, t.Cost, s.Instances())
		}
		if err := s.local.TakeAllAt(s.local.Clock(), shares, res); err != nil { // checked: no duplicate
			return out, err
		}
	}
	// With several instances each holds a share: its tokens are not the
	// quota's (see ratelimit.Result.StateUnknown).
	for i := range res {
		res[i].StateUnknown, res[i].Uncharged = s.Instances() > 1, true
	}
	return out, nil
}

var (
	_ ratelimit.Store      = (*Store)(nil)
	_ ratelimit.MultiStore = (*Store)(nil)
)
