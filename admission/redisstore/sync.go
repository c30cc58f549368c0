package redisstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// syncer is sync mode: each bucket in use has a local view here, decided
// at in-process speed, and reconciled with the bucket in Redis (the same
// key as exact mode's) every interval.
//
// The view of a bucket holds g, the fleet's tokens in Redis at the last
// reconciliation (negative while the fleet owes tokens), and what this
// instance took since. It may admit, until the next reconciliation,
//
//	allowance = g/n + rate × min(since, interval) − taken
//
// n being Config.Instances: its share of the fleet's tokens, and the
// refill at the full rate (an instance that carries all the traffic gets
// all of it). So within one interval the fleet admits at most
// g + n × rate × interval where one bucket admits g + rate × interval,
// and the excess goes to Redis as debt that the refill repays before the
// next admission: in all, at most n × (rate × interval + cost) beyond
// the exact answer (the cost term: an instance may take one cost whole
// when g holds it, or no instance could ever take a cost above g/n).
// With an even load the debt settles each instance at rate/n; with an
// uneven one the idle instances' shares of g flow to the busy one over a
// few intervals.
//
// A reconciliation pushes what was taken and pulls g (sync.lua). The
// background loop reconciles every view that took something in the
// interval; a take that finds its view missing or older than two
// intervals reconciles it first, as one batched script call. While Redis
// cannot answer, views go stale and the failure policy decides (Local:
// this instance's share of the quota); what it admits then is not pushed.
//
// A syncer is safe for concurrent use.
type syncer struct {
	s        *Store
	n        float64 // Config.Instances
	interval int64   // ns
	seed     maphash.Seed
	shards   [syncShards]syncShard

	stop chan struct{}
	done chan struct{}
}

const syncShards = 64

type syncShard struct {
	mu        sync.Mutex
	m         map[ratelimit.BucketKey]*syncView
	decisions uint64   // counted here, under mu, not on one shared line
	_         [40]byte // keep shards on separate cache lines
}

// decisions returns the decisions made so far.
func (y *syncer) decisions() uint64 {
	var n uint64
	for i := range y.shards {
		sh := &y.shards[i]
		sh.mu.Lock()
		n += sh.decisions
		sh.mu.Unlock()
	}
	return n
}

// syncView is a bucket as this instance sees it. Guarded by its shard's
// mu.
type syncView struct {
	l        ratelimit.Limit
	g        float64 // the fleet's tokens at the last reconciliation
	syncedAt int64   // local ns of the last reconciliation; 0: never
	seq      uint64  // reconciliations sent; replies older than applied are ignored
	applied  uint64
	taken    float64 // taken since the last push
	pushing  float64 // taken, pushed, not yet acknowledged
	lastUse  int64   // local ns
}

func newSyncer(s *Store) *syncer {
	y := &syncer{s: s, n: float64(s.cfg.Instances), interval: int64(s.cfg.SyncInterval),
		seed: maphash.MakeSeed(), stop: make(chan struct{}), done: make(chan struct{})}
	for i := range y.shards {
		y.shards[i].m = map[ratelimit.BucketKey]*syncView{}
	}
	go y.loop()
	return y
}

func (y *syncer) shard(k ratelimit.BucketKey) int {
	return int(maphash.String(y.seed, k.Tenant) % syncShards)
}

// close stops the background loop and waits for it.
func (y *syncer) close() {
	close(y.stop)
	<-y.done
}

func (y *syncer) loop() {
	defer close(y.done)
	t := time.NewTicker(time.Duration(y.interval))
	defer t.Stop()
	for {
		select {
		case <-y.stop:
			return
		case <-t.C:
			y.reconcileAll()
		}
	}
}

// decide decides takes (of one tenant, checked) into res from the local
// views, reconciling the missing and stale ones first.
func (y *syncer) decide(ctx context.Context, takes []ratelimit.Take, res []ratelimit.Result) (Outcome, error) {
	now := y.s.now().UnixNano()
	var stale []ratelimit.Take
	sh := &y.shards[y.shard(takes[0].Key)]
	sh.mu.Lock()
	for _, t := range takes {
		if v := sh.m[t.Key]; v == nil || v.l != t.Limit || now-v.syncedAt >= 2*y.interval {
			stale = append(stale, t)
		}
	}
	sh.mu.Unlock()
	if len(stale) > 0 {
		if err := y.refresh(ctx, stale); err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return Outcome{}, ctxErr
			}
			return y.s.fallback(takes, res, err)
		}
		now = y.s.now().UnixNano()
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	all := true
	for i, t := range takes {
		v := sh.m[t.Key]
		if v == nil || v.l != t.Limit { // reloaded in between: ask again
			return y.s.fallback(takes, res, fmt.Errorf("redisstore: sync: view of %v changed", t.Key))
		}
		a := v.allowance(now, y.n, y.interval, t.Cost)
		res[i] = ratelimit.Result{Remaining: max(0, a)}
		if a < t.Cost {
			all = false
			res[i].RetryAfter = secondsToDuration((t.Cost - a) / t.Limit.Rate)
		}
	}
	for i, t := range takes {
		v := sh.m[t.Key]
		v.lastUse = now
		if all {
			v.taken += t.Cost
			res[i].Allowed = true
			res[i].Remaining = max(0, res[i].Remaining-t.Cost)
		}
		res[i].ResetAfter = secondsToDuration((t.Limit.Burst - v.fleet(now, y.interval)) / t.Limit.Rate)
	}
	sh.decisions++
	return Outcome{Source: FromSync}, nil
}

// allowance is what this instance may still take from v at now (see
// syncer) for a take of cost.
func (v *syncView) allowance(now int64, n float64, interval int64, cost float64) float64 {
	share := v.g / n
	if v.g >= cost && share < cost {
		share = cost
	}
	return share + v.refill(now, interval) - v.taken - v.pushing
}

// refill is what the bucket's rate has added since the reconciliation,
// counted for at most one interval.
func (v *syncView) refill(now, interval int64) float64 {
	return float64(min(max(0, now-v.syncedAt), interval)) / 1e9 * v.l.Rate
}

// fleet estimates the fleet's tokens at now: g, refilled, less what this
// instance took since.
func (v *syncView) fleet(now, interval int64) float64 {
	return math.Min(v.l.Burst, v.g+v.refill(now, interval)-v.taken-v.pushing)
}

// pushLocked moves v's taken tokens to pushing and returns them with the
// reconciliation's sequence number. The shard's mu must be held.
func (v *syncView) pushLocked() (float64, uint64) {
	p := v.taken
	v.pushing += p
	v.taken = 0
	v.seq++
	return p, v.seq
}

// settleLocked applies a reconciliation's reply g (or, with ok false,
// its failure) to v. The shard's mu must be held.
func (v *syncView) settleLocked(pushed float64, seq uint64, g float64, ok bool, now int64) {
	v.pushing -= pushed
	if !ok {
		v.taken += pushed // pushed again next time
		return
	}
	if seq > v.applied {
		v.applied, v.g, v.syncedAt = seq, g, now
	}
}

// refresh reconciles the views of takes (making the missing ones), one
// script call each, batched with every other call to Redis.
func (y *syncer) refresh(ctx context.Context, takes []ratelimit.Take) error {
	sh := &y.shards[y.shard(takes[0].Key)]
	type push struct {
		amount float64
		seq    uint64
	}
	pushes := make([]push, len(takes))
	sh.mu.Lock()
	for i, t := range takes {
		v := sh.m[t.Key]
		if v == nil || v.l != t.Limit {
			v = &syncView{l: t.Limit, lastUse: y.s.now().UnixNano()}
			sh.m[t.Key] = v
		}
		pushes[i].amount, pushes[i].seq = v.pushLocked()
	}
	sh.mu.Unlock()
	gs := make([]float64, len(takes))
	var err error
	for i, t := range takes {
		key := bucketKey(t.Key)
		var rep any
		if rep, err = y.s.run(ctx, y.s.laneFor(ctx, key), syncScript, []string{key}, t.Limit.Rate, t.Limit.Burst, pushes[i].amount); err != nil {
			break
		}
		if gs[i], err = decodeSync(rep); err != nil {
			break
		}
	}
	now := y.s.now().UnixNano()
	sh.mu.Lock()
	for i, t := range takes {
		if v := sh.m[t.Key]; v != nil {
			v.settleLocked(pushes[i].amount, pushes[i].seq, gs[i], err == nil, now)
		}
	}
	sh.mu.Unlock()
	return err
}

// reconcileAll pushes what every view took since the last interval and
// pulls the fleet's tokens, in pipelines per Redis lane, and forgets the
// views unused for ten intervals.
func (y *syncer) reconcileAll() {
	now := y.s.now().UnixNano()
	type item struct {
		k      ratelimit.BucketKey
		v      *syncView
		amount float64
		seq    uint64
		c      *call
	}
	var items []item
	for i := range y.shards {
		sh := &y.shards[i]
		sh.mu.Lock()
		for k, v := range sh.m {
			switch {
			case v.taken > 0:
				amount, seq := v.pushLocked()
				items = append(items, item{k: k, v: v, amount: amount, seq: seq})
			case v.pushing == 0 && now-v.lastUse > 10*y.interval:
				delete(sh.m, k)
			}
		}
		sh.mu.Unlock()
	}
	// By lane: a slow master delays and fails its own buckets only.
	byLane := map[*lane][]*call{}
	ctx := context.Background()
	for i := range items {
		it := &items[i]
		key := bucketKey(it.k)
		it.c = getCall(syncScript, []string{key}, it.v.l.Rate, it.v.l.Burst, it.amount)
		ln := y.s.laneFor(ctx, key)
		byLane[ln] = append(byLane[ln], it.c)
	}
	var wg sync.WaitGroup
	for ln, calls := range byLane {
		wg.Go(func() { y.reconcileLane(ln, calls) })
	}
	wg.Wait()
	now = y.s.now().UnixNano()
	for _, it := range items {
		g, err := it.c.v, it.c.err
		var tokens float64
		if err == nil {
			tokens, err = decodeSync(g)
		}
		sh := &y.shards[y.shard(it.k)]
		sh.mu.Lock()
		it.v.settleLocked(it.amount, it.seq, tokens, err == nil, now)
		sh.mu.Unlock()
		putCall(it.c)
	}
}

// reconcileLane sends calls through ln's breaker in pipelines of at most
// MaxBatch.
func (y *syncer) reconcileLane(ln *lane, calls []*call) {
	for batch := range slices.Chunk(calls, y.s.cfg.Batch.MaxBatch) {
		done, err := ln.breaker.Allow()
		if err != nil {
			for _, c := range batch {
				c.err = ErrBreakerOpen
			}
			continue
		}
		y.s.runPipeline(ln, batch)
		var verdict error
		for _, c := range batch {
			if c.verdict != nil {
				verdict = c.verdict
				break
			}
		}
		done(verdict)
	}
}

// decodeSync checks the shape of sync.lua's reply, {"%.17g", µs}, and
// returns the bucket's tokens.
func decodeSync(v any) (float64, error) {
	a, ok := v.([]any)
	if !ok || len(a) != 2 {
		return 0, fmt.Errorf("%w: sync: %T %v, want a 2-element array", errBadReply, v, v)
	}
	s, ok := a[0].(string)
	if !ok {
		return 0, fmt.Errorf("%w: sync: tokens = %T, want a string", errBadReply, a[0])
	}
	g, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(g) {
		return 0, fmt.Errorf("%w: sync: tokens = %q", errBadReply, s)
	}
	return g, nil
}
