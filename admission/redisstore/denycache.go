package redisstore

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// denyCache remembers denials: a take of cost from bucket k denied with
// RetryAfter d at instant t will be denied again until t+d by any caller
// (other instances can only take more), so it is answered locally without a
// Redis call. An admitted take that leaves fewer than cost tokens says the
// same of the next take: denied until the refill brings cost. A TakeAll is
// denied until every one of its buckets holds its cost. Entries expire
// then; memory is bounded by max entries (when a shard is full it drops
// expired entries, then an arbitrary one).
//
// When an entry expires, one caller refreshes it from Redis and the others
// with the same take wait for its answer (single flight): a denial is
// shared, while tokens are not, so after an admission that leaves tokens,
// or a failure, the waiters ask Redis themselves. Without this, every
// caller hammering an empty bucket went to Redis at once each time a
// denial expired.
//
// A denyCache is safe for concurrent use.
type denyCache struct {
	seed   maphash.Seed
	per    int // max entries per shard
	shards [denyShards]denyShard
}

const denyShards = 16

type denyShard struct {
	mu sync.Mutex
	m  map[denyKey]denyEntry
}

// denyKey names a take, or a TakeAll by its first take and the others
// encoded in rest. It includes the limits, so a reload that changes a
// tenant's quota never finds a denial decided under the old one: the next
// take asks Redis. So does a fixed window's next window (another End).
type denyKey struct {
	k    ratelimit.BucketKey
	l    ratelimit.Limit
	cost float64
	rest string // the other takes of a TakeAll (denyKeyOf); empty for one
}

// denySlot is what a denial knows of one bucket: only the wait. The
// bucket is not read again, and other instances may take from it, so its
// remaining tokens and reset are not remembered.
type denySlot struct {
	until int64 // Unix ns: the bucket holds its take's cost again
}

type denyEntry struct {
	until int64      // Unix ns: denied before this instant
	first denySlot   // the first take's bucket
	more  []denySlot // the other takes' buckets, for a TakeAll
	// refresh is non-nil once the entry has expired and a caller is
	// asking Redis; it is closed when that caller settles the entry.
	refresh chan struct{}
}

// denyState is what get found.
type denyState uint8

const (
	denyMiss denyState = iota // no denial holds: ask Redis
	denyHit                   // denied: the results hold
	denyLead                  // expired: ask Redis, then settle
	denyWait                  // expired, another caller is asking: wait
)

func newDenyCache(size int) *denyCache {
	c := &denyCache{seed: maphash.MakeSeed(), per: max(1, size/denyShards)}
	for i := range c.shards {
		c.shards[i].m = make(map[denyKey]denyEntry)
	}
	return c
}

func (c *denyCache) shard(k ratelimit.BucketKey) *denyShard {
	var h maphash.Hash
	h.SetSeed(c.seed)
	h.WriteString(k.Tenant)
	h.WriteByte(0)
	h.WriteString(k.Scope)
	return &c.shards[h.Sum64()%denyShards]
}

// get looks dk up at now. On denyHit it writes the denial's results into
// res (one per take). When the entry has expired, the first caller gets
// denyLead (and must call settle), the others denyWait and a channel
// closed when it has settled.
func (c *denyCache) get(dk denyKey, now time.Time, res []ratelimit.Result) (denyState, <-chan struct{}) {
	t := now.UnixNano()
	sh := c.shard(dk.k)
	sh.mu.Lock()
	e, ok := sh.m[dk]
	switch {
	case !ok:
		sh.mu.Unlock()
		return denyMiss, nil
	case t >= e.until && e.refresh != nil:
		sh.mu.Unlock()
		return denyWait, e.refresh
	case t >= e.until:
		e.refresh = make(chan struct{})
		sh.m[dk] = e
		sh.mu.Unlock()
		return denyLead, nil
	}
	sh.mu.Unlock()
	res[0] = e.first.result(t)
	for i, sl := range e.more {
		res[i+1] = sl.result(t)
	}
	return denyHit, nil
}

// result is the denial a slot gives at t (Unix ns). The bucket was not
// read: other instances may have taken from it since, so only the wait is
// known (an upper bound on the refill).
func (sl denySlot) result(t int64) ratelimit.Result {
	return ratelimit.Result{RetryAfter: time.Duration(max(0, sl.until-t)), StateUnknown: true}
}

// settle ends the refresh that get's denyLead started: res is the answer
// to takes decided at now (what it says of the next take is cached), and
// ok is false when there is none (an error, or the failure policy
// decided). The waiters are woken, and find the new denial if there is
// one.
func (c *denyCache) settle(dk denyKey, takes []ratelimit.Take, res []ratelimit.Result, ok bool, now time.Time) {
	var e denyEntry
	t := now.UnixNano()
	if ok {
		e = denialOf(takes, res, t)
	}
	sh := c.shard(dk.k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e.until != 0 {
		sh.putLocked(dk, e, t, c.per) // closes the refresh
		return
	}
	if old, found := sh.m[dk]; found && old.refresh != nil {
		close(old.refresh)
		delete(sh.m, dk)
	}
}

// put records what res, the answer to takes decided at now, says of the
// next such take: denied until every bucket holds its cost again. An
// admission that leaves every cost records nothing.
func (c *denyCache) put(dk denyKey, takes []ratelimit.Take, res []ratelimit.Result, now time.Time) {
	t := now.UnixNano()
	e := denialOf(takes, res, t)
	if e.until == 0 {
		return
	}
	sh := c.shard(dk.k)
	sh.mu.Lock()
	sh.putLocked(dk, e, t, c.per)
	sh.mu.Unlock()
}

// denialOf is the entry res, the answer to takes at t (Unix ns), makes:
// each bucket holds its cost again after denialAfter; the whole take is
// denied until the last of them. Its until is zero when no bucket is
// short.
func denialOf(takes []ratelimit.Take, res []ratelimit.Result, t int64) denyEntry {
	var e denyEntry
	var longest time.Duration
	slot := func(i int) denySlot {
		w := denialAfter(takes[i].Limit, takes[i].Cost, res[i])
		longest = max(longest, w)
		return denySlot{until: t + int64(w)}
	}
	e.first = slot(0)
	if len(takes) > 1 {
		e.more = make([]denySlot, len(takes)-1)
		for i := range e.more {
			e.more[i] = slot(i + 1)
		}
	}
	if longest <= 0 {
		return denyEntry{}
	}
	e.until = t + int64(longest)
	return e
}

// denialAfter is how long after r, an answer to a take of cost under l,
// the bucket is sure to lack cost: r's RetryAfter for a denial (zero for a
// bucket that had room in a refused TakeAll), the refill of what r left
// short of cost for an admission (nothing for one that did not read the
// bucket), or for a fixed window the time until its end, when it comes
// back whole (r's ResetAfter). A window's denial is keyed by its end, so
// it never refuses a take of the next window.
func denialAfter(l ratelimit.Limit, cost float64, r ratelimit.Result) time.Duration {
	if !r.Allowed {
		return r.RetryAfter
	}
	if r.StateUnknown || r.Remaining >= cost {
		return 0
	}
	if l.Fixed() {
		return r.ResetAfter
	}
	return secondsToDuration((cost - r.Remaining) / l.Rate)
}

// putLocked records e, decided at t (Unix ns), under dk, making room
// among at most per entries, and settles a refresh of dk in progress.
// sh.mu must be held.
func (sh *denyShard) putLocked(dk denyKey, e denyEntry, t int64, per int) {
	if len(sh.m) >= per {
		for k, old := range sh.m {
			if t >= old.until && old.refresh == nil {
				delete(sh.m, k)
			}
		}
		for k, old := range sh.m {
			if len(sh.m) < per {
				break
			}
			if old.refresh != nil {
				close(old.refresh)
			}
			delete(sh.m, k)
		}
	}
	if old, ok := sh.m[dk]; ok && old.refresh != nil {
		close(old.refresh)
	}
	sh.m[dk] = e
}

// len returns the number of entries, for tests.
func (c *denyCache) len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}
