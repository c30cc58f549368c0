package redisstore

import (
	"fmt"
	"math"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// syncView is a bucket as this instance sees it. Guarded by its shard's
// mu.
type syncView struct {
	l         ratelimit.Limit
	g         float64 // the fleet's tokens at the last reconciliation
	syncedAt  int64   // clock of the last reconciliation; 0: never
	seq       uint64  // reconciliations sent; replies older than applied are ignored
	applied   uint64
	taken     float64 // taken since the last push
	pushing   float64 // taken, pushed, not yet acknowledged
	lastUse   int64   // clock of the last take
	lastShort int64   // clock of the last take refused for want of tokens
}

// allowance is what this instance may still take from v at now (see
// syncer) for a take of cost. A stale view's share of g is not counted
// (g is too old to divide): only the refill since.
func (v *syncView) allowance(now int64, n float64, interval int64, cost float64) float64 {
	share := v.g / n
	if v.g >= cost && share < cost {
		share = cost
	}
	if v.stale(now, interval) {
		share = min(0, share) // a debt still counts
	}
	return share + v.refill(now, interval) - v.taken - v.pushing
}

// stale reports whether v was last reconciled two intervals or more
// before now.
func (v *syncView) stale(now, interval int64) bool { return now-v.syncedAt >= 2*interval }

// refill is what the bucket's rate has added since the reconciliation,
// counted for at most one interval.
func (v *syncView) refill(now, interval int64) float64 {
	return float64(min(max(0, now-v.syncedAt), interval)) / 1e9 * v.l.Rate
}

// fleet estimates the fleet's tokens at now: g, refilled, less what this
// instance took since.
func (v *syncView) fleet(now, interval int64) float64 {
	return math.Min(v.l.Burst, v.g+v.refill(now, interval)-v.taken-v.pushing)
}

// pushLocked moves v's taken tokens to pushing and returns them with the
// reconciliation's sequence number. The shard's mu must be held.
func (v *syncView) pushLocked() (float64, uint64) {
	p := v.taken
	v.pushing += p
	v.taken = 0
	v.seq++
	return p, v.seq
}

// settleLocked applies a reconciliation's reply g (or, with ok false,
// its failure) to v. The shard's mu must be held.
func (v *syncView) settleLocked(pushed float64, seq uint64, g float64, ok bool, now int64) {
	v.pushing -= pushed
	if !ok {
		v.taken += pushed // pushed again next time
		return
	}
	if seq > v.applied {
		v.applied, v.g, v.syncedAt = seq, g, now
	}
}

// decodeSync checks the shape of sync.lua's reply for n buckets, {a
// little-endian double per bucket, µs}, and writes the buckets' tokens
// into gs.
func decodeSync(v any, gs []float64) error {
	a, ok := v.([]any)
	if !ok || len(a) != len(gs)+1 {
		return fmt.Errorf("%w: sync: %T %v, want a %d-element array", errBadReply, v, v, len(gs)+1)
	}
	for i := range gs {
		g, err := decodeDouble(a[i])
		if err != nil {
			return err
		}
		gs[i] = g
	}
	return nil
}
