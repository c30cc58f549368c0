package bulkhead

import (
	"hash/maphash"
	"sync"
)

// capShards spreads tenants over independent locks; a power of two.
const capShards = 64

// Caps counts each tenant's requests in flight and holds every tenant under a
// cap the caller passes on each call (the tenant's tier's max_concurrent, or
// its override).
//
// A tenant's entry exists only while it has requests in flight, so memory
// follows current concurrency, not the number of tenants ever seen. Calls
// for a tenant already in flight do not allocate.
//
// Caps is safe for concurrent use. Create one with [NewCaps].
type Caps struct {
	shards [capShards]capShard // first, so shards start on cache lines
	seed   maphash.Seed
}

type capShard struct {
	mu       sync.Mutex
	inFlight map[string]int // tenant → requests in flight (> 0)
	free     []*slotToken   // tokens of released slots, for reuse
	_        [24]byte       // keep shards on their own cache lines
}

// Slot is one admitted request under a tenant's cap. The zero Slot holds
// nothing. Release gives it back; only the first Release counts, through
// any copy of the Slot (like Seat, it is a generation-checked handle).
type Slot struct {
	tok *slotToken
	gen uint64
}

// slotToken makes Release idempotent across copies: a Slot is valid while
// its gen matches the token's, and releasing bumps the token's gen. Guarded
// by its shard's mu.
type slotToken struct {
	gen    uint64
	shard  *capShard
	tenant string
}

// NewCaps returns an empty set of caps.
func NewCaps() *Caps {
	c := &Caps{seed: maphash.MakeSeed()}
	for i := range c.shards {
		c.shards[i].inFlight = make(map[string]int)
	}
	return c
}

func (c *Caps) shard(tenantID string) *capShard {
	return &c.shards[maphash.String(c.seed, tenantID)&(capShards-1)]
}

// TryAcquire admits one more request of tenantID if it has fewer than max in
// flight, and reports whether it did. A max below 1 admits nothing; a caller
// that wants no cap skips Caps altogether.
func (c *Caps) TryAcquire(tenantID string, max int) (Slot, bool) {
	if max < 1 {
		return Slot{}, false
	}
	sh := c.shard(tenantID)
	sh.mu.Lock()
	n := sh.inFlight[tenantID]
	if n >= max {
		sh.mu.Unlock()
		return Slot{}, false
	}
	sh.inFlight[tenantID] = n + 1
	var tok *slotToken
	if k := len(sh.free); k > 0 {
		tok, sh.free = sh.free[k-1], sh.free[:k-1]
	} else {
		tok = &slotToken{shard: sh}
	}
	tok.tenant = tenantID
	gen := tok.gen
	sh.mu.Unlock()
	return Slot{tok: tok, gen: gen}, true
}

// InFlight reports how many requests of tenantID hold a slot.
func (c *Caps) InFlight(tenantID string) int {
	sh := c.shard(tenantID)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.inFlight[tenantID]
}

// Tenants reports how many tenants have requests in flight, which is the
// number of entries Caps holds.
func (c *Caps) Tenants() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += len(sh.inFlight)
		sh.mu.Unlock()
	}
	return n
}

// Release gives the slot back. Only the first Release of a slot counts,
// whichever copy of the Slot it is called on; it is safe to call from
// several goroutines.
func (s Slot) Release() {
	tok := s.tok
	if tok == nil {
		return
	}
	sh := tok.shard
	sh.mu.Lock()
	if tok.gen != s.gen {
		sh.mu.Unlock()
		return
	}
	tok.gen++
	if n := sh.inFlight[tok.tenant]; n > 1 {
		sh.inFlight[tok.tenant] = n - 1
	} else {
		delete(sh.inFlight, tok.tenant)
	}
	tok.tenant = ""
	sh.free = append(sh.free, tok)
	sh.mu.Unlock()
}
