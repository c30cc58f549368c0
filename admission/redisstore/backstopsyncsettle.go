package redisstore

import "github.com/fairgate/fairgate/internal/fairshare"

// settle counts a settled request's usage (signed, see
// Store.SettleBackstop) as one more take of the interval, as
// fairshare.Backstop.Settle does on this instance's part: the tenant's
// asked and admitted tokens count it; a charge takes from the part what
// it holds above the tenant's critical floor and the tenant owes the
// rest, which its next takes here pay first; a refund pays the debt
// first. All of it is pushed with the next reconciliation. A tenant this
// instance does not remember (it admitted nothing of it, or forgot it)
// has only the part settled, in full.
func (b *syncBackstop) settle(tenant string, cost float64) {
	now, n := b.y.clock(), b.y.n()
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.tenants[tenant]
	if t == nil || b.l.Rate <= 0 {
		b.debitLocked(cost)
		return
	}
	l := b.l
	t.asked += cost
	t.took += cost
	use := t.admitted*fairshare.Decay(now-t.at, l.Window.Seconds()) + n*(t.took+t.pushTook)/l.Window.Seconds()
	within := use < fairshare.ShareFor(l, b.level, b.weights, t.weight)
	tokens := b.tokensLocked(now, n)
	after, owed := fairshare.SettleOwing(tokens, l.Burst/n, t.owed, cost, within)
	t.owed = owed
	b.debitLocked(tokens - after)
}

// debitLocked takes cost (a credit when negative) from this instance's
// part of every shard, as evenly as the shards divide the bucket. b.mu
// must be held.
func (b *syncBackstop) debitLocked(cost float64) {
	if cost == 0 {
		return
	}
	part := cost / float64(len(b.shards))
	for i := range b.shards {
		b.shards[i].taken += part
	}
}
