package bulkhead

import "time"

// seatLocked grants r a seat of p (lent by lender, or p's own when lender
// is p), acquired at acquired after waiting waited: a seat token from the
// free list, marked long when r's route holds seats long, which the
// tenant's count of long seats held then counts. ps.mu must be held.
func (ps *Pools) seatLocked(p, lender *pool, r *Request, acquired time.Time, waited time.Duration) Seat {
	var tok *seatToken
	if n := len(ps.free); n > 0 {
		tok = ps.free[n-1]
		ps.free = ps.free[:n-1]
	} else {
		tok = new(seatToken)
	}
	tok.acquired, tok.class, tok.long = acquired, r.holdClass(), false
	if u := p.users[r.Tenant]; u != nil && ps.longLocked(tok.class) {
		tok.long = true
		u.longHeld++
		u.memoOK = false
	}
	return Seat{tok: tok, gen: tok.gen, pool: p, lender: lender, tenant: r.Tenant, waited: waited}
}

// Release gives the seat back, handing it to the next queued request. Only
// the first Release of a seat counts.
func (s Seat) Release() {
	if s.tok == nil {
		return
	}
	ps := s.pool.set
	now := time.Now()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if s.tok.gen != s.gen {
		return
	}
	s.tok.gen++
	if hold := now.Sub(s.tok.acquired); s.pool.meanHold == 0 {
		s.pool.meanHold = max(hold, 1)
	} else {
		s.pool.meanHold += (hold - s.pool.meanHold) / 8
	}
	ps.learnHoldLocked(s.tok.class, now.Sub(s.tok.acquired))
	if u := s.pool.users[s.tenant]; u != nil && s.tok.long {
		u.longHeld--
		u.memoOK = false
	}
	if len(ps.free) < maxFreeTokens {
		ps.free = append(ps.free, s.tok)
	}
	ps.heldLocked(s.pool, s.tenant, now, -1, now.Sub(s.tok.acquired))
	ps.releaseLocked(s.pool, s.lender, s.tenant)
}

// Waited reports how long the request waited in the queue for the seat.
func (s Seat) Waited() time.Duration { return s.waited }

// Borrowed reports whether the seat was borrowed from another pool.
func (s Seat) Borrowed() bool { return s.lender != s.pool }
