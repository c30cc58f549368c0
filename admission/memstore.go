package admission

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
)

// MemoryStore is the embedded Store: token buckets in an in-process map,
// split into shards so that concurrent decisions for different tenants rarely
// share a lock. Taking from a bucket that exists allocates nothing.
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
	now    func() time.Time
	sweep  int64 // sweep interval, ns
	shards []memShard
}

type memShard struct {
	mu        sync.Mutex
	buckets   map[BucketKey]memEntry
	nextSweep int64
	_         [40]byte // keep shards on separate cache lines
}

type memEntry struct {
	b      bucket
	fullAt int64 // Unix ns at which the bucket is full and can be forgotten
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
	// Now is the clock. Nil means time.Now.
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
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &MemoryStore{seed: maphash.MakeSeed(), now: o.Now, sweep: int64(o.SweepInterval), shards: make([]memShard, n)}
	for i := range s.shards {
		s.shards[i].buckets = make(map[BucketKey]memEntry)
	}
	return s
}

// Take implements Store. It never returns an error.
func (s *MemoryStore) Take(_ context.Context, k BucketKey, l Limit, cost float64) (Result, error) {
	return s.TakeAt(s.now().UnixNano(), k, l, cost), nil
}

// TakeAt is Take at the instant now (Unix nanoseconds).
func (s *MemoryStore) TakeAt(now int64, k BucketKey, l Limit, cost float64) Result {
	sh := s.shard(k)
	sh.mu.Lock()
	if now >= sh.nextSweep {
		sh.sweepLocked(now)
		sh.nextSweep = now + s.sweep
	}
	e, ok := sh.buckets[k]
	if !ok {
		e.b = fullBucket(l, now)
	}
	b, r := e.b.take(l, now, cost)
	sh.buckets[k] = memEntry{b: b, fullAt: b.fullAt(l)}
	sh.mu.Unlock()
	return r
}

// Tokens returns the tokens bucket k holds now under l, for the admin view.
// It changes nothing.
func (s *MemoryStore) Tokens(k BucketKey, l Limit) float64 {
	now := s.now().UnixNano()
	sh := s.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.buckets[k]
	if !ok {
		return l.Burst
	}
	return e.b.tokensAt(l, now)
}

// Len returns the number of buckets held, for tests and metrics.
func (s *MemoryStore) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.buckets)
		sh.mu.Unlock()
	}
	return n
}

// Sweep drops every bucket that is full at now (Unix ns) from all shards.
func (s *MemoryStore) Sweep(now int64) {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.sweepLocked(now)
		sh.mu.Unlock()
	}
}

func (sh *memShard) sweepLocked(now int64) {
	for k, e := range sh.buckets {
		if e.fullAt <= now {
			delete(sh.buckets, k)
		}
	}
}

func (s *MemoryStore) shard(k BucketKey) *memShard {
	var h maphash.Hash
	h.SetSeed(s.seed)
	h.WriteString(k.Tenant)
	h.WriteByte(0)
	h.WriteString(k.Scope)
	return &s.shards[h.Sum64()&uint64(len(s.shards)-1)]
}

var _ Store = (*MemoryStore)(nil)
