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
// Redis call. Entries expire at t+d; memory is bounded by max entries (when
// a shard is full it drops expired entries, then an arbitrary one).
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
	until int64 // Unix ns: denied before this instant
}

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

// get returns the cached denial of (k, cost) at now, if one holds.
func (c *denyCache) get(k ratelimit.BucketKey, l ratelimit.Limit, cost float64, now time.Time) (ratelimit.Result, bool) {
	t := now.UnixNano()
	sh := c.shard(k)
	sh.mu.Lock()
	e, ok := sh.m[denyKey{k, l, cost}]
	if ok && t >= e.until {
		delete(sh.m, denyKey{k, l, cost})
		ok = false
	}
	sh.mu.Unlock()
	if !ok {
		return ratelimit.Result{}, false
	}
	// The bucket was not read: other instances may have taken from it
	// since, so only the wait is known (an upper bound on the refill).
	return ratelimit.Result{RetryAfter: time.Duration(e.until - t), StateUnknown: true}, true
}

// put records the denial r of (k, cost) decided at now.
func (c *denyCache) put(k ratelimit.BucketKey, l ratelimit.Limit, cost float64, r ratelimit.Result, now time.Time) {
	if r.Allowed || r.RetryAfter <= 0 {
		return
	}
	t := now.UnixNano()
	e := denyEntry{until: t + int64(r.RetryAfter)}
	sh := c.shard(k)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if len(sh.m) >= c.per {
		for dk, de := range sh.m {
			if t >= de.until {
				delete(sh.m, dk)
			}
		}
		for dk := range sh.m {
			if len(sh.m) < c.per {
				break
			}
			delete(sh.m, dk)
		}
	}
	sh.m[denyKey{k, l, cost}] = e
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
