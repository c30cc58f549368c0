package ratelimit

import (
	"context"
	"hash/maphash"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/fairgate/fairgate/internal/fairshare"
)

// MemoryStore is the embedded Store: token buckets in an in-process map,
// split into shards by tenant so that concurrent decisions for different
// tenants rarely share a lock, while a tenant's buckets share one: a
// TakeAll of one tenant's buckets takes one lock. Taking from a bucket that
// exists allocates nothing.
//
// Memory is bounded by forgetting: a bucket that has refilled to full is the
// same as one never seen, so each shard drops such buckets as it sweeps
// (at most once a SweepInterval, during a Take). Memory is therefore about
// one entry per bucket touched within its own refill time (Burst/Rate).
//
// A MemoryStore is safe for concurrent use. Its zero value is not usable;
// call NewMemoryStore.
type MemoryStore struct {
	seed   maphash.Seed
	now    func() time.Time // nil: time.Since(epoch), the monotonic clock alone
	epoch  time.Time        // the store's instant 0 (see Clock)
	sweep  int64            // sweep interval, ns
	shards []memShard

	backstopMu sync.Mutex
	backstop   fairshare.Backstop // guarded by backstopMu
}

// memShard is one lock's worth of buckets. They are found by the 64-bit
// hash that also chose the shard (one hash per take, and a cheap integer
// probe); the entry holds its key, and the rare key whose hash collides with
// another's goes to overflow instead.
type memShard struct {
	mu        sync.Mutex
	buckets   map[uint64]*memEntry
	overflow  map[BucketKey]*memEntry // hash collisions; nil until one happens
	nextSweep int64
	_         [32]byte // keep shards on separate cache lines
}

type memEntry struct {
	key BucketKey
	b   bucket
	// fullAt is the instant (store clock, ns) at which the bucket is full
	// and can be forgotten. It never moves earlier: under one limit each
	// take's is the latest anyway, and after a Relimit to a slower rate a
	// take still decided under the old limit must not bring the old,
	// earlier instant back (the bucket would come back full).
	fullAt int64
	// fixed is set when b is a fixed window's state (see Limit.End).
	fixed bool
}

// windowGrace is how long a fixed window's entry outlives its end (see
// memEntry.take).
const windowGrace = int64(time.Minute)

// newEntry returns the entry of k first seen at now under l.
func newEntry(k BucketKey, l Limit, now int64) *memEntry {
	if l.Fixed() {
		return &memEntry{key: k, fixed: true, fullAt: now}
	}
	return &memEntry{key: k, b: fullBucket(l, now), fullAt: now}
}

// entryFor returns e, or a new entry when e is nil or of the other kind
// than l (a bucket, a window): a limit changed from one to the other
// starts afresh. The new one replaces e's state in place.
func (sh *memShard) entryFor(h uint64, e *memEntry, k BucketKey, l Limit, now int64) *memEntry {
	switch {
	case e == nil:
		e = newEntry(k, l, now)
		sh.addLocked(h, e)
	case e.fixed != l.Fixed():
		*e = *newEntry(k, l, now)
	}
	return e
}

// take takes cost from e under l at now (the store's clock; wall is the
// same instant as Unix ns, which a fixed window counts in).
func (e *memEntry) take(l Limit, now, wall int64, cost float64) Result {
	var r Result
	if l.Fixed() {
		e.b, r = e.b.takeFixed(l, wall, cost)
		// The window's end, and a minute more: the gate's clock cut the
		// window, and a wall clock stepped back since the store began
		// leaves the gate's end later than the store's reckoning of it.
		e.fullAt = max(e.fullAt, now+max(e.b.last-wall, 0)+windowGrace)
		return r
	}
	if e.b, r = e.b.take(l, now, cost); r.Allowed {
		e.fullAt = max(e.fullAt, e.b.fullAfter(r))
	} else {
		// Unchanged tokens, but perhaps a slower limit than the last
		// take's: the bucket is full later, not earlier.
		e.fullAt = max(e.fullAt, e.b.fullAt(l))
	}
	return r
}

// check returns the refusal of a take of cost under l at now from e (nil
// for a bucket never seen), and whether e has the cost; it changes
// nothing.
func (e *memEntry) check(l Limit, now, wall int64, cost float64) (Result, bool) {
	if l.Fixed() {
		var b bucket
		if e != nil && e.fixed {
			b = e.b
		}
		left := b.leftIn(l)
		return fixedDenial(b, l, wall, left, cost), left >= cost
	}
	tokens := l.Burst
	if e != nil && !e.fixed {
		tokens = e.b.tokensAt(l, now)
	}
	return denial(l, tokens, cost), tokens >= cost
}

// getLocked returns the entry of k (hash h), or nil. sh.mu must be held.
func (sh *memShard) getLocked(h uint64, k BucketKey) *memEntry {
	if e := sh.buckets[h]; e != nil && e.key == k {
		return e
	}
	if len(sh.overflow) > 0 {
		return sh.overflow[k]
	}
	return nil
}

// addLocked stores a new entry e of hash h. sh.mu must be held.
func (sh *memShard) addLocked(h uint64, e *memEntry) {
	if sh.buckets[h] == nil {
		sh.buckets[h] = e
		return
	}
	if sh.overflow == nil {
		sh.overflow = make(map[BucketKey]*memEntry)
	}
	sh.overflow[e.key] = e
}

// MemoryStoreOptions configures a MemoryStore. The zero value is a good
// default.
type MemoryStoreOptions struct {
	// Shards is the number of independently locked shards; rounded up to a
	// power of two. Zero means 64.
	Shards int
	// SweepInterval is how often a shard drops its full buckets. Zero means
	// one second.
	SweepInterval time.Duration
	// Now is the clock. Nil means time.Now (read more cheaply: only its
	// monotonic part is needed).
	Now func() time.Time
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore(o MemoryStoreOptions) *MemoryStore {
	n := 64
	if o.Shards > 0 {
		n = 1
		for n < o.Shards {
			n <<= 1
		}
	}
	if o.SweepInterval <= 0 {
		o.SweepInterval = time.Second
	}
	epoch := time.Now()
	if o.Now != nil {
		epoch = o.Now()
	}
	s := &MemoryStore{seed: maphash.MakeSeed(), now: o.Now, epoch: epoch, sweep: int64(o.SweepInterval), shards: make([]memShard, n)}
	for i := range s.shards {
		s.shards[i].buckets = make(map[uint64]*memEntry)
	}
	return s
}

// Take implements Store. It never returns an error.
func (s *MemoryStore) Take(_ context.Context, k BucketKey, l Limit, cost float64) (Result, error) {
	return s.takeAt(0, true, k, l, cost), nil
}

// Clock returns the store's current instant: nanoseconds since the store
// was made, measured as a difference of two readings of its clock. With
// time.Now those carry the monotonic clock, so stepping the wall clock (NTP,
// a VM resumed, an operator) neither refills buckets nor locks tenants out
// for the size of the step; only Redis, where instances must agree, uses
// wall time (its TIME).
func (s *MemoryStore) Clock() int64 {
	if s.now == nil {
		return int64(time.Since(s.epoch)) // reads the monotonic clock only
	}
	return int64(s.now().Sub(s.epoch))
}

// TakeAt is Take at the instant now on the store's clock (see Clock).
//
// Taking from a bucket that exists allocates nothing; a new bucket is one
// small allocation.
func (s *MemoryStore) TakeAt(now int64, k BucketKey, l Limit, cost float64) Result {
	return s.takeAt(now, false, k, l, cost)
}

// takeAt is TakeAt, or with clock Take: the store's clock is then read
// once the bucket is found, under the shard's lock. (Read before the
// lookup, it made a decision at 100k tenants about 1.4x slower: the
// bucket's load, a cache miss, and the clock's read did not overlap. See
// bench/PERF.md.)
func (s *MemoryStore) takeAt(now int64, clock bool, k BucketKey, l Limit, cost float64) Result {
	h, sh := s.locate(k)
	sh.mu.Lock()
	e := sh.getLocked(h, k)
	if clock {
		now = s.Clock()
	}
	if s.sweepDueLocked(sh, now) {
		e = sh.getLocked(h, k) // it may have been swept
	}
	if e == nil || e.fixed != l.Fixed() {
		e = sh.entryFor(h, e, k, l, now)
	}
	var r Result
	switch {
	case e.fixed:
		r = e.take(l, now, s.wall(now), cost)
	default: // a bucket, most takes: inline
		if e.b, r = e.b.take(l, now, cost); r.Allowed {
			e.fullAt = max(e.fullAt, e.b.fullAfter(r))
		} else {
			e.fullAt = max(e.fullAt, e.b.fullAt(l))
		}
	}
	sh.mu.Unlock()
	return r
}

// wall returns the store's instant now (see Clock) as Unix ns: the wall
// clock when the store was made, advanced by the store's clock since.
func (s *MemoryStore) wall(now int64) int64 { return s.epoch.UnixNano() + now }

// sweepDueLocked drops sh's full buckets when its sweep is due at now,
// and says whether it swept. sh.mu must be held.
func (s *MemoryStore) sweepDueLocked(sh *memShard, now int64) bool {
	if now < sh.nextSweep {
		return false
	}
	sh.sweepLocked(now)
	sh.nextSweep = now + s.sweep
	return true
}

// TakeAll implements MultiStore: all or nothing, under the locks of the
// takes' shards (one for one tenant's buckets). The only error is
// ErrDuplicateBucket.
func (s *MemoryStore) TakeAll(_ context.Context, takes []Take) ([]Result, error) {
	res := make([]Result, len(takes))
	return res, s.TakeAllAt(s.Clock(), takes, res)
}

// TakeAllAt is TakeAll at the instant now on the store's clock (see
// Clock), writing one Result per take into res, which must be as long as
// takes.
func (s *MemoryStore) TakeAllAt(now int64, takes []Take, res []Result) error {
	if Duplicate(takes) {
		return ErrDuplicateBucket
	}
	// Lock each shard once, in index order, so that two TakeAlls over
	// the same shards cannot deadlock.
	var buf [4]int
	shards := buf[:0]
	for _, t := range takes {
		if _, i := s.hash(t.Key); !slices.Contains(shards, i) {
			shards = append(shards, i)
		}
	}
	slices.Sort(shards)
	for _, i := range shards {
		s.shards[i].mu.Lock()
		s.sweepDueLocked(&s.shards[i], now)
	}
	all, wall := true, s.wall(now)
	for i, t := range takes {
		h, sh := s.locate(t.Key)
		var has bool
		res[i], has = sh.getLocked(h, t.Key).check(t.Limit, now, wall, t.Cost)
		all = all && has
	}
	if all {
		for i, t := range takes {
			h, sh := s.locate(t.Key)
			res[i] = sh.entryFor(h, sh.getLocked(h, t.Key), t.Key, t.Limit, now).take(t.Limit, now, wall, t.Cost)
		}
	}
	for _, i := range shards {
		s.shards[i].mu.Unlock()
	}
	return nil
}

// Tokens returns the tokens bucket k holds now under l, for the admin view.
// It changes nothing.
func (s *MemoryStore) Tokens(k BucketKey, l Limit) float64 {
	now := s.Clock()
	h, sh := s.locate(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	r, _ := sh.getLocked(h, k).check(l, now, s.wall(now), 0)
	return r.Remaining
}

// Relimit tells the store that the limits of its buckets may have changed
// (a configuration reload): each bucket for which limitOf gives a limit is
// kept until it is full under that limit, not the one it was last taken
// under. Without it, a bucket emptied just before a reload that lowered the
// rate would be forgotten at the old "full" instant and come back full:
// a quota change would refill it. Buckets limitOf does not know keep their
// instant, and no instant moves earlier (a bucket kept longer than needed
// costs memory; one forgotten early is refilled). The tokens are unchanged.
func (s *MemoryStore) Relimit(limitOf func(BucketKey) (Limit, bool)) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, e := range sh.buckets {
			relimitLocked(e, limitOf)
		}
		for _, e := range sh.overflow {
			relimitLocked(e, limitOf)
		}
		sh.mu.Unlock()
	}
}

func relimitLocked(e *memEntry, limitOf func(BucketKey) (Limit, bool)) {
	if l, ok := limitOf(e.key); ok && l.Rate > 0 && !e.fixed && !l.Fixed() {
		e.fullAt = max(e.fullAt, e.b.fullAt(l))
	}
}

// Len returns the number of buckets held, for tests and metrics.
func (s *MemoryStore) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.buckets) + len(sh.overflow)
		sh.mu.Unlock()
	}
	return n
}

// Sweep drops every bucket that is full at now (on the store's clock, see
// Clock) from all shards.
func (s *MemoryStore) Sweep(now int64) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.sweepLocked(now)
		sh.mu.Unlock()
	}
}

func (sh *memShard) sweepLocked(now int64) {
	for h, e := range sh.buckets {
		if e.fullAt <= now {
			delete(sh.buckets, h)
		}
	}
	for k, e := range sh.overflow {
		if e.fullAt <= now {
			delete(sh.overflow, k)
		}
	}
}

// locate returns the 64-bit hash of k that finds it in its shard, and
// the shard, chosen by the tenant alone so that a tenant's buckets share
// one lock. Two keys with the same hash are still told apart (see
// getLocked).
func (s *MemoryStore) locate(k BucketKey) (uint64, *memShard) {
	h, i := s.hash(k)
	return h, &s.shards[i]
}

// hash returns locate's hash and the index of k's shard.
func (s *MemoryStore) hash(k BucketKey) (uint64, int) {
	th := maphash.String(s.seed, k.Tenant)
	h := th
	if k.Scope != "" {
		h ^= bits.RotateLeft64(maphash.String(s.seed, k.Scope), 29) * 0x9e3779b97f4a7c15
	}
	return h, int(th & uint64(len(s.shards)-1))
}

var (
	_ Store      = (*MemoryStore)(nil)
	_ MultiStore = (*MemoryStore)(nil)
)
