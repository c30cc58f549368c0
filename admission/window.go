package admission

import (
	"sync"
	"sync/atomic"
	"time"
)

// windowSlots is how many one-second slots a minuteCounters keeps: the
// last minute.
const windowSlots = 60

// counterKinds is how many counters each slot holds: one per layer for a
// tenant's rejections; a pool's waits use the first two.
const counterKinds = int(LayerUpstream) + 1

// minuteCounters counts events over the last minute in one-second slots,
// with atomic operations only: recording costs a load and an add, no lock.
// The zero value is ready to use and safe for concurrent use.
//
// It is for a display, not for a decision: when a slot turns over to a new
// second, an add racing with the reset may be lost.
type minuteCounters struct {
	slots [windowSlots]minuteSlot
}

type minuteSlot struct {
	sec atomic.Int64 // the Unix second the counts belong to
	n   [counterKinds]atomic.Int64
}

// add adds v to counter k of the slot of now.
func (m *minuteCounters) add(now time.Time, k int, v int64) {
	sec := now.Unix()
	s := &m.slots[sec%windowSlots]
	if old := s.sec.Load(); old != sec && s.sec.CompareAndSwap(old, sec) {
		for i := range s.n {
			s.n[i].Store(0)
		}
	}
	s.n[k].Add(v)
}

// sums returns each counter's sum over the minute up to now.
func (m *minuteCounters) sums(now time.Time) (c [counterKinds]int64) {
	sec := now.Unix()
	for i := range m.slots {
		s := &m.slots[i]
		if t := s.sec.Load(); t > sec-windowSlots && t <= sec {
			for k := range s.n {
				c[k] += s.n[k].Load()
			}
		}
	}
	return c
}

// counterSet is a minuteCounters per key (a tenant ID, a pool name), made on
// first use; reading one is lock-free. Keys are bounded by the config.
type counterSet struct{ m sync.Map }

func (cs *counterSet) get(key string) *minuteCounters {
	if v, ok := cs.m.Load(key); ok {
		return v.(*minuteCounters)
	}
	v, _ := cs.m.LoadOrStore(key, new(minuteCounters))
	return v.(*minuteCounters)
}

// sums returns key's sums, zero when nothing was recorded for it.
func (cs *counterSet) sums(key string, now time.Time) [counterKinds]int64 {
	if v, ok := cs.m.Load(key); ok {
		return v.(*minuteCounters).sums(now)
	}
	return [counterKinds]int64{}
}

// Counters of a pool's waits in its minuteCounters.
const (
	waitSumNanos = 0
	waitCount    = 1
)
