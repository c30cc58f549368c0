package client

import (
	"sync"
	"time"
)

// budgetSlots is how finely the window slides: requests and retries leave
// it a tenth of a window at a time.
const budgetSlots = 10

// budget allows a retry while the retries of the last window stay below
// ratio × the requests of that window plus reserve (MinPerSecond ×
// Window): Finagle's RetryBudget. Every method takes the time, so the
// arithmetic is a pure function of now. It is safe for concurrent use.
type budget struct {
	ratio   float64
	reserve float64
	slot    time.Duration

	mu sync.Mutex
	// origin is the time of the first call; slot i covers
	// [origin + i×slot, origin + (i+1)×slot).
	origin time.Time
	// cur is the index of the newest slot counted in; the ring holds
	// slots cur-budgetSlots+1 … cur.
	cur      int64
	requests [budgetSlots]int64
	retries  [budgetSlots]int64
}

func newBudget(c BudgetConfig) *budget {
	return &budget{
		ratio:   c.Ratio,
		reserve: c.MinPerSecond * c.Window.Seconds(),
		slot:    max(c.Window/budgetSlots, 1),
	}
}

// deposit counts a request made at now.
func (b *budget) deposit(now time.Time) {
	b.mu.Lock()
	i := b.advanceLocked(now)
	b.requests[i]++
	b.mu.Unlock()
}

// withdraw takes one retry at now and reports whether the budget had it.
func (b *budget) withdraw(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := b.advanceLocked(now)
	var reqs, rets int64
	for j := range budgetSlots {
		reqs += b.requests[j]
		rets += b.retries[j]
	}
	if b.ratio*float64(reqs)+b.reserve-float64(rets) < 1 {
		return false
	}
	b.retries[i]++
	return true
}

// advanceLocked moves the ring to now's slot, clearing the slots that
// left the window, and returns now's index in the ring. A time before the
// newest slot counts in the newest slot (a clock that went back).
func (b *budget) advanceLocked(now time.Time) int {
	if b.origin.IsZero() {
		b.origin = now
	}
	s := int64(now.Sub(b.origin) / b.slot)
	if s > b.cur {
		for k := b.cur + 1; k <= s && k <= b.cur+budgetSlots; k++ {
			j := k % budgetSlots
			b.requests[j], b.retries[j] = 0, 0
		}
		b.cur = s
	}
	return int(b.cur % budgetSlots)
}
