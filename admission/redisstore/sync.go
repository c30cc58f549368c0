package redisstore

import (
	"context"
	"errors"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

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
// n being Store.Instances (the live count, or Config.Instances): its share of the fleet's tokens, and the
// refill at the full rate (an instance that carries all the traffic gets
// all of it). So within one interval the fleet admits at most
// g + n × rate × interval where one bucket admits g + rate × interval,
// and the excess goes to Redis as debt that the refill repays before the
// next admission: in all, at most n × (rate × interval + cost) beyond the
// exact answer (the cost term: an instance may take one cost whole when g
// holds it, or no instance could ever take a cost above g/n). That holds
// for any rate, burst, n and interval because the debt may grow as far as
// the fleet can take beyond the refill (debtCap); capped lower, at one
// burst, the excess beyond the cap was forgiven every interval whenever
// (n − 1) × rate × interval exceeded the burst.
// n is the live count: in the heartbeat after an instance joins, the
// others still divide g by one fewer, and the fleet may take burst/n more
// (charged as debt: the cap allows for a fleet that doubles); an instance
// that dies leaves what it took since its last reconciliation, at most
// burst/n + rate × interval, uncharged once (see members).
// With an even load the debt settles each instance at rate/n; with an
// uneven one the idle instances' shares of g flow to the busy one over a
// few intervals.
//
// A reconciliation pushes what was taken and pulls g (sync.lua). The
// background loop reconciles every view taken from since the last
// reconciliation, or short of a take in the last two intervals (a tenant
// over its quota learns when its tokens are back), so views in use stay
// fresh off the request path, and Redis's work per decision falls as the
// decisions per bucket and interval grow. A view
// older than that (asked seldom, or Redis too slow to keep up) is stale:
// its share of g no longer counts, only the refill since, and a take that
// needs more reconciles it first, as one batched script call; so does the
// first take of a bucket. A view unused for syncForget (or ten intervals,
// if longer) is forgotten: a stale view costs Redis nothing, only memory.
// While Redis cannot answer, views go stale: they admit at most one
// interval's refill, then the failure policy decides (Local: this
// instance's share of the quota); what it admits is not pushed.
//
// A syncer is safe for concurrent use.
type syncer struct {
	s        *Store
	interval int64     // ns
	epoch    time.Time // instant syncClockStart of clock
	seed     maphash.Seed
	shards   [syncShards]syncShard

	backstopMu sync.Mutex
	backstop   *syncBackstop // nil until the first backstop take

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

// decisions returns the decisions made so far, the backstop's included.
func (y *syncer) decisions() uint64 {
	var n uint64
	y.backstopMu.Lock()
	if b := y.backstop; b != nil {
		b.mu.Lock()
		n += b.decisions
		b.mu.Unlock()
	}
	y.backstopMu.Unlock()
	for i := range y.shards {
		sh := &y.shards[i]
		sh.mu.Lock()
		n += sh.decisions
		sh.mu.Unlock()
	}
	return n
}

func newSyncer(s *Store) *syncer {
	y := &syncer{s: s, interval: int64(s.cfg.SyncInterval),
		epoch: s.now(), seed: maphash.MakeSeed(), stop: make(chan struct{}), done: make(chan struct{})}
	for i := range y.shards {
		y.shards[i].m = map[ratelimit.BucketKey]*syncView{}
	}
	go y.loop()
	return y
}

// syncClockStart is clock's value when the syncer is made: far above 0, so
// that a view never reconciled (syncedAt 0) is always stale.
const syncClockStart = 1 << 62

// clock returns the syncer's current instant in ns: a difference of two
// readings of the store's clock, so with time.Now the monotonic clock, as
// for the embedded store (ratelimit.MemoryStore.Clock). Stepping the wall
// clock neither refills views nor freezes them.
func (y *syncer) clock() int64 { return syncClockStart + int64(y.s.now().Sub(y.epoch)) }

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
			y.reconcileBackstop()
		}
	}
}

// decide decides takes (of one tenant, checked) into res from the local
// views, under one lock, reconciling first the views that are missing or
// stale and short.
func (y *syncer) decide(ctx context.Context, takes []ratelimit.Take, res []ratelimit.Result) (Outcome, error) {
	sh := &y.shards[y.shard(takes[0].Key)]
	for attempt := 0; ; attempt++ {
		now := y.clock()
		sh.mu.Lock()
		stale := y.staleLocked(sh, takes, now)
		if stale == nil {
			y.decideLocked(sh, takes, res, now)
			sh.mu.Unlock()
			return Outcome{Source: FromSync}, nil
		}
		sh.mu.Unlock()
		err := errViewChanged
		if attempt == 0 {
			err = y.refresh(ctx, stale)
		}
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return Outcome{}, ctxErr
			}
			return y.s.fallback(takes, res, err)
		}
	}
}

// errViewChanged is the cause of a policy decision whose views were
// replaced (a reload changed the limit) while it reconciled them.
var errViewChanged = errors.New("redisstore: sync: views changed while reconciling")

// staleLocked returns the takes whose views must be reconciled before
// deciding: missing, of another limit (a reload), or stale and short of
// the cost. Nil (no allocation) when there is none. sh.mu must be held.
func (y *syncer) staleLocked(sh *syncShard, takes []ratelimit.Take, now int64) []ratelimit.Take {
	var stale []ratelimit.Take
	for _, t := range takes {
		v := sh.m[t.Key]
		if v == nil || v.l != t.Limit || (v.stale(now, y.interval) && v.allowance(now, y.n(), y.interval, t.Cost) < t.Cost) {
			stale = append(stale, t)
		}
	}
	return stale
}

// decideLocked decides takes into res, all or nothing, from their views,
// which exist. sh.mu must be held.
func (y *syncer) decideLocked(sh *syncShard, takes []ratelimit.Take, res []ratelimit.Result, now int64) {
	all, n := true, y.n()
	for i, t := range takes {
		a := sh.m[t.Key].allowance(now, n, y.interval, t.Cost)
		// With several instances the allowance is this instance's share,
		// neither the bucket's tokens nor a bound on them (see Result):
		// not for a client's headers.
		res[i] = ratelimit.Result{Remaining: max(0, a), StateUnknown: n > 1}
		if a < t.Cost {
			all = false
			res[i].RetryAfter = secondsToDuration((t.Cost - a) / t.Limit.Rate)
		}
	}
	for i, t := range takes {
		v := sh.m[t.Key]
		v.lastUse = now
		if !all && res[i].RetryAfter > 0 {
			v.lastShort = now
		}
		if all {
			v.taken += t.Cost
			res[i].Allowed = true
			res[i].Remaining = max(0, res[i].Remaining-t.Cost)
		}
		res[i].ResetAfter = secondsToDuration((t.Limit.Burst - v.fleet(now, y.interval)) / t.Limit.Rate)
	}
	sh.decisions++
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
		switch {
		case v == nil:
			v = &syncView{l: t.Limit, lastUse: y.clock()}
			sh.m[t.Key] = v
		case v.l != t.Limit:
			// A reload changed the limit: the same bucket, so what
			// was taken under the old one is still pushed, and g,
			// reckoned under it, is stale.
			v.l, v.syncedAt = t.Limit, 0
		}
		pushes[i].amount, pushes[i].seq = v.pushLocked()
	}
	sh.mu.Unlock()
	gs := make([]float64, len(takes))
	var err error
	for i, t := range takes {
		key := bucketKey(t.Key)
		var rep any
		if rep, err = y.s.run(ctx, y.s.laneFor(ctx, key), syncScript, []string{key}, t.Limit.Rate, t.Limit.Burst, pushes[i].amount, y.debtCap(t.Limit)); err != nil {
			break
		}
		if err = decodeSync(rep, gs[i:i+1]); err != nil {
			break
		}
	}
	now := y.clock()
	sh.mu.Lock()
	for i, t := range takes {
		if v := sh.m[t.Key]; v != nil {
			v.settleLocked(pushes[i].amount, pushes[i].seq, gs[i], err == nil, now)
		}
	}
	sh.mu.Unlock()
	return err
}

// reconcileAll pushes what every view in use took since the last
// interval and pulls the fleet's tokens, in pipelines per Redis lane, and
// forgets the views unused for long (see syncer). On a single node one script
// call reconciles up to syncKeysPerCall buckets (a cluster's calls hold
// one key: keys of a call must share a slot).
func (y *syncer) reconcileAll() {
	now := y.clock()
	type item struct {
		k      ratelimit.BucketKey
		v      *syncView
		amount float64
		seq    uint64
	}
	var items []item
	for i := range y.shards {
		sh := &y.shards[i]
		sh.mu.Lock()
		for k, v := range sh.m {
			switch {
			case v.taken != 0 || now-v.lastShort <= 2*y.interval:
				// Taken from since the last push, or short lately:
				// kept fresh here, off the request path. A view only
				// asked and admitted needs nothing more: what it took
				// is pushed at the next interval, and a stale view
				// still admits one interval's refill before a take
				// reconciles it. So a bucket costs Redis a call per
				// interval in which it was taken from, not one per
				// interval for two after every take.
				amount, seq := v.pushLocked()
				items = append(items, item{k: k, v: v, amount: amount, seq: seq})
			case v.pushing == 0 && now-v.lastUse > max(int64(syncForget), 10*y.interval):
				delete(sh.m, k)
			}
		}
		sh.mu.Unlock()
	}
	per := syncKeysPerCall
	if y.s.cluster != nil {
		per = 1
	}
	// By lane: a slow master delays and fails its own buckets only.
	type group struct {
		items []int // indexes into items
		c     *call
	}
	byLane := map[*lane][]*group{}
	var groups []*group
	ctx := context.Background()
	for i := range items {
		ln := y.s.laneFor(ctx, bucketKey(items[i].k))
		gs := byLane[ln]
		if len(gs) == 0 || len(gs[len(gs)-1].items) == per {
			gs = append(gs, &group{})
			groups = append(groups, gs[len(gs)-1])
			byLane[ln] = gs
		}
		g := gs[len(gs)-1]
		g.items = append(g.items, i)
	}
	for _, g := range groups {
		keys := make([]string, len(g.items))
		args := make([]any, 0, 4*len(g.items))
		for j, i := range g.items {
			it := &items[i]
			keys[j] = bucketKey(it.k)
			args = append(args, it.v.l.Rate, it.v.l.Burst, it.amount, y.debtCap(it.v.l))
		}
		g.c = getCall(syncScript, keys, args...)
	}
	var wg sync.WaitGroup
	for ln, gs := range byLane {
		calls := make([]*call, len(gs))
		for i, g := range gs {
			calls[i] = g.c
		}
		wg.Go(func() { y.reconcileLane(ln, calls, max(1, syncKeysPerPipeline/per)) })
	}
	wg.Wait()
	now = y.clock()
	for _, g := range groups {
		gs := make([]float64, len(g.items))
		err := g.c.err
		if err == nil {
			err = decodeSync(g.c.v, gs)
		}
		for j, i := range g.items {
			it := &items[i]
			sh := &y.shards[y.shard(it.k)]
			sh.mu.Lock()
			it.v.settleLocked(it.amount, it.seq, gs[j], err == nil, now)
			sh.mu.Unlock()
		}
		putCall(g.c)
	}
}

// debtCap is the most debt l's bucket may carry in Redis: what n
// instances can take in one interval beyond the refill, n × (rate ×
// interval + cost), with the cost at its largest, the burst (a take of
// more is refused), and n doubled: a fleet that grows, until every
// instance has counted the newcomers (see members), takes as if it were
// that much larger, and its excess must be charged, not forgiven. It is
// at least two bursts.
func (y *syncer) debtCap(l ratelimit.Limit) float64 {
	return 2 * y.n() * (l.Rate*float64(y.interval)/1e9 + l.Burst)
}

// n is the number of instances sharing each bucket.
func (y *syncer) n() float64 { return float64(y.s.Instances()) }

// syncForget is how long a view may go unused before it is forgotten.
const syncForget = 10 * time.Second

// Reconciliation batching: buckets per script call on a single node, and
// buckets per pipeline, so that one pipeline holds Redis (which runs one
// script at a time) only briefly between the decisions' calls.
const (
	syncKeysPerCall     = 64
	syncKeysPerPipeline = 512
)

// syncInFlight is how many reconciliation pipelines a lane has in flight.
const syncInFlight = 2

// reconcileLane sends calls through ln's breaker in pipelines of at most
// perPipeline, syncInFlight at once (one in Redis, one read from).
func (y *syncer) reconcileLane(ln *lane, calls []*call, perPipeline int) {
	batches := slices.Collect(slices.Chunk(calls, perPipeline))
	var next atomic.Int64
	var wg sync.WaitGroup
	// Redis runs one script at a time: more pipelines at once would only
	// queue there, past the round-trip timeout.
	for range min(len(batches), syncInFlight) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(batches)); i = next.Add(1) - 1 {
				y.reconcileBatch(ln, batches[i])
			}
		})
	}
	wg.Wait()
}

// reconcileBatch sends one pipeline of calls to ln's node, unless its
// breaker is open (the decisions have already given up on it). A
// reconciliation is not a decision: it has a deadline of its own, sized
// from the buckets it carries, and whether it was late or failed is never
// told to the breaker, so a large reconciliation on a busy Redis cannot
// send the decisions to the failure policy. A failed one is pushed again
// next interval (settleLocked); if Redis is really away, the views go
// stale and the decisions' own round trips open the breaker.
func (y *syncer) reconcileBatch(ln *lane, batch []*call) {
	if ln.breaker.State() == gobreaker.StateOpen {
		for _, c := range batch {
			c.err = ErrBreakerOpen
		}
		return
	}
	buckets := 0
	for _, c := range batch {
		buckets += len(c.keys)
	}
	_, rtt, failed := y.s.sendPipeline(batch, y.reconcileDeadline(buckets))
	y.s.stats.roundTrip(failed, rtt > y.s.cfg.Timeout)
}

// reconcileDeadline is how long a reconciliation of buckets may take:
// the decisions' round-trip deadline and Redis's work on the buckets at
// reconcileCostPerBucket each, twice over.
func (y *syncer) reconcileDeadline(buckets int) time.Duration {
	return lateFactor*y.s.cfg.Timeout + 2*time.Duration(buckets)*reconcileCostPerBucket
}

// reconcileCostPerBucket is an upper estimate of Redis's work on one
// bucket of a reconciliation (sync.lua's load, debit and store).
const reconcileCostPerBucket = 5 * time.Microsecond
