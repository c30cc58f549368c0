package admission

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/fairgate/fairgate/internal/fairshare"
)

// criticalReserve keeps, without pools, the last permits of the adaptive
// limit for critical requests: a non-critical request takes a permit only
// while the calls in flight leave the reserve free (admitAdaptive). With
// pools the bulkhead does this (a critical request takes any free seat,
// and queues ahead of its tenant's own exports); without them the limit
// is first come, and a flood of sheddable calls retried at once holds
// every permit between the shedder's calibrations, however much of it the
// shedder refuses — the critical reads that arrive then are refused.
//
// The reserve is sized as the bulkhead's headroom is: U + 2√U rounded up,
// and one more for the request that arrives, where U is the time-averaged
// number of critical requests holding permits; none while there has been
// no critical request for a while; at most half the limit. It is part of
// shedding (priority decides who is refused), so shedding: disabled turns
// it off.
type criticalReserve struct {
	mu    sync.Mutex
	busy  fairshare.Occupancy // critical requests holding permits; guarded by mu
	seats atomic.Int64        // the reserve, recomputed at every change and observation
}

// reserveTau is the time constant (s) of the critical requests' average.
const reserveTau = 1.0

// add counts delta critical requests taking (+1) or giving back (−1) a
// permit at now (ns since the gate's epoch).
func (r *criticalReserve) add(now int64, delta int) {
	r.mu.Lock()
	r.busy.Set(now, reserveTau, r.busy.Level()+delta)
	r.recomputeLocked(now)
	r.mu.Unlock()
}

// refresh recomputes the reserve at now, so that it decays when critical
// requests stop coming.
func (r *criticalReserve) refresh(now int64) {
	r.mu.Lock()
	r.recomputeLocked(now)
	r.mu.Unlock()
}

func (r *criticalReserve) recomputeLocked(now int64) {
	u := r.busy.At(now, reserveTau)
	n := 0
	if r.busy.Level() > 0 || u >= 1e-3 {
		n = int(math.Ceil(u+2*math.Sqrt(u)-1e-9)) + 1
	}
	r.seats.Store(int64(n))
}

// size is the reserve: the permits a non-critical call leaves free
// (shed.Limiter.TryAcquireLeaving holds it to half the limit).
func (r *criticalReserve) size() int { return int(r.seats.Load()) }
