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
// same of the next take: denied until the refill brings cost. Entries expire at t+d; memory is bounded by max entries (when
// a shard is full it drops expired entries, then an arbitrary one).
//
// When an entry expires, one caller refreshes it from Redis and the others
// with the same take wait for its answer (single flight): a denial is
// shared, while tokens are not, so after an admission or a failure the
// waiters ask Redis themselves. Without this, every caller hammering an
// empty bucket went to Redis at once each time a denial expired.
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

// denyKey includes the limit, so a reload that changes a tenant's quota
// never finds a denial decided under the old one: the next take asks Redis.
type denyKey struct {
	k    ratelimit.BucketKey
	l    ratelimit.Limit
	cost float64
}

type denyEntry struct {
	until     int64 // Unix ns: denied before this instant
	resetAt   int64 // Unix ns: the bucket is full again
	remaining float64
	// refresh is non-nil once the entry has expired and a caller is
	// asking Redis; it is closed when that caller settles the entry.
	refresh chan struct{}
}

// denyState is what get found.
type denyState uint8

const (
	denyMiss denyState = iota // no denial holds: ask Redis
	denyHit                   // denied: the Result holds
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

// get returns the cached denial of (k, cost) at now, if one holds. When
// the entry has expired, the first caller gets denyLead (and must call
// settle), the others denyWait and a channel closed when it has settled.
func (c *denyCache) get(k ratelimit.BucketKey, l ratelimit.Limit, cost float64, now time.Time) (ratelimit.Result, denyState, <-chan struct{}) {
	t := now.UnixNano()
	dk := denyKey{k, l, cost}
	sh := c.shard(k)
	sh.mu.Lock()
	e, ok := sh.m[dk]
	switch {
	case !ok:
		sh.mu.Unlock()
		return ratelimit.Result{}, denyMiss, nil
	case t >= e.until && e.refresh != nil:
		sh.mu.Unlock()
		return ratelimit.Result{}, denyWait, e.refresh
	case t >= e.until:
		e.refresh = make(chan struct{})
		sh.m[dk] = e
		sh.mu.Unlock()
		return ratelimit.Result{}, denyLead, nil
	}
	sh.mu.Unlock()
	return ratelimit.Result{
		Remaining:  e.remaining,
		RetryAfter: time.Duration(e.until - t),
		ResetAfter: time.Duration(max(0, e.resetAt-t)),
	}, denyHit, nil
}

// settle ends the refresh that get's denyLead started: r is the answer
// decided at now (a denial is cached again), and ok is false when there is
// none (an error, or the failure policy decided). The waiters are woken,
// and find the new denial if there is one.
func (c *denyCache) settle(k ratelimit.BucketKey, l ratelimit.Limit, cost float64, r ratelimit.Result, ok bool, now time.Time) {
	dk := denyKey{k, l, cost}
	sh := c.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if wait := denialAfter(l, cost, r); ok && wait > 0 {
		sh.putLocked(dk, r.Remaining, wait, r.ResetAfter, now.UnixNano(), c.per) // closes the refresh
		return
	}
	if e, found := sh.m[dk]; found && e.refresh != nil {
		close(e.refresh)
		delete(sh.m, dk)
	}
}

// put records what r, the answer to a take of (k, cost) decided at now,
// says of the next such take: denied until the bucket holds cost again.
// An admission that leaves cost or more records nothing.
func (c *denyCache) put(k ratelimit.BucketKey, l ratelimit.Limit, cost float64, r ratelimit.Result, now time.Time) {
	wait := denialAfter(l, cost, r)
	if wait <= 0 {
		return
	}
	sh := c.shard(k)
	sh.mu.Lock()
	sh.putLocked(denyKey{k, l, cost}, r.Remaining, wait, r.ResetAfter, now.UnixNano(), c.per)
	sh.mu.Unlock()
}

// denialAfter is how long after r, an answer to a take of cost under l,
// the next take of cost is sure to be denied: r's RetryAfter for a denial,
// the refill of what r left short of cost for an admission.
func denialAfter(l ratelimit.Limit, cost float64, r ratelimit.Result) time.Duration {
	if !r.Allowed {
		return r.RetryAfter
	}
	if r.Remaining >= cost {
		return 0
	}
	return secondsToDuration((cost - r.Remaining) / l.Rate)
}

// putLocked records that dk is denied for wait from t (Unix ns), with
// remaining tokens then and the bucket full after reset, making room among
// at most per entries, and settles a refresh of dk in progress. sh.mu must
// be held.
func (sh *denyShard) putLocked(dk denyKey, remaining float64, wait, reset time.Duration, t int64, per int) {
	if len(sh.m) >= per {
		for k, e := range sh.m {
			if t >= e.until && e.refresh == nil {
				delete(sh.m, k)
			}
		}
		for k, e := range sh.m {
			if len(sh.m) < per {
				break
			}
			if e.refresh != nil {
				close(e.refresh)
			}
			delete(sh.m, k)
		}
	}
	if old, ok := sh.m[dk]; ok && old.refresh != nil {
		close(old.refresh)
	}
	sh.m[dk] = denyEntry{until: t + int64(wait), resetAt: t + int64(reset), remaining: remaining}
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
