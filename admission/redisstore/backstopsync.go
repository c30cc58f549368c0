package redisstore

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/fairgate/fairgate/internal/fairshare"
)

//go:embed backstopsync.lua
var backstopSyncLua string

// backstopSyncScript runs backstopsync.lua, with bucket.lua and decay.lua.
var backstopSyncScript = redis.NewScript(bucketLua + decayLua + backstopSyncLua)

// syncBackstop is sync mode's fair global backstop: decided in process,
// by the rule of fairshare.Backstop (fairshare.Judge), on this instance's
// part of a bucket and on the fleet's tenant rates as last reconciled,
// both kept in Redis in shards and reconciled every interval off the
// request path, as the buckets' views are.
//
// The backstop is split into shards: on Redis Cluster one per master (each
// shard's hash tag is one of that master's slots), on a single node one.
// Shard i holds the part rate/S, burst/S of the bucket and the fleet's
// decayed demand and admitted rates of the tenants that hash to it. Every
// interval an instance makes one call per shard: it pushes what it took
// from the part and what its tenants of the shard asked and were admitted,
// and pulls the part's tokens and the rates of every tenant of the shard.
// So no key is touched by requests, each shard's keys take 1/S of the
// backstop's traffic, and one master's trouble leaves the other shards
// reconciled.
//
// A decision's tokens are this instance's part of the bucket, summed over
// the shards: for a shard reconciled within two intervals, g/n + rate/S ×
// min(since, interval) − taken (as a view, see syncer); for a stale one,
// its part of a local bucket, at most burst/(S n), refilled at rate/(S n)
// since the last reconciliation (what the Local policy would enforce),
// so a master away costs the other shards nothing and its own part no more
// than the policy. A tenant's use is the fleet's admitted rate and what
// this instance admitted since (× n, standing for the fleet's in the
// same interval); the fair level is computed here from the
// fleet's demands (every window/LevelEvery, as fairshare.Backstop's). The
// reserve is the part's: a tenant within its share may take this
// instance's tokens down to −burst/n.
//
// Bound: the fleet admits at most n × (rate × interval + cost) beyond what
// the one bucket would, as a bucket's views do (the excess is debt in the
// parts, repaid before the next admission above share), and the fairness
// is that of demands at most an interval old. Only the first decision
// waits for a reconciliation; until one succeeds, the failure policy
// decides.
type syncBackstop struct {
	y *syncer
	// reconciling is held for a whole reconciliation: one at a time, so
	// replies apply in the order they were asked (the first takes and the
	// loop may try at once).
	reconciling sync.Mutex
	mu          sync.Mutex
	l           fairshare.BackstopLimit // of the latest take
	shards      []backstopShard
	tenants     map[string]*backstopTenant
	level       float64 // the fair level λ; +Inf: nobody above share
	weights     float64 // Σ weights counted at levelAt
	levelAt     int64
	synced      bool   // a reconciliation has succeeded
	decisions   uint64 // made here
	lastUse     int64  // clock of the last take
	scratch     []fairshare.Demand
}

// backstopShard is one shard's part of the bucket, as a view.
type backstopShard struct {
	bucket, table string  // its keys
	g             float64 // the part's tokens at the last reconciliation
	syncedAt      int64   // 0: never
	taken         float64 // taken from the part since the last push
	pushing       float64
}

// backstopTenant is a tenant's fleet rates as last pulled, and what it
// asked and was admitted here since.
type backstopTenant struct {
	shard            int
	weight           float64
	demand, admitted float64 // the fleet's rates at at
	at               int64
	asked, took      float64 // tokens since the last push
	pushAsked        float64 // pushed, not yet acknowledged
	pushTook         float64
	// owed is what the tenant's settlements here charged beyond what this
	// instance's part could give it: its next takes here pay it first
	// (fairshare.JudgeOwing).
	owed float64
}

// newSyncBackstop makes the backstop's shards: one per master on a
// cluster (a tag for each master found by asking the cluster which slot
// a candidate tag hashes to), one on a single node.
func newSyncBackstop(ctx context.Context, y *syncer) *syncBackstop {
	b := &syncBackstop{y: y, tenants: map[string]*backstopTenant{}, level: math.Inf(1)}
	for _, tag := range backstopTags(ctx, y.s.cluster) {
		b.shards = append(b.shards, backstopShard{bucket: keyPrefix + tag + "}:fair-bucket", table: keyPrefix + tag + "}:fair-tenants"})
	}
	return b
}

// backstopTags returns one hash tag per master of c ("b0", "b1", …,
// the first that land on each), or "b0" alone for a single node or when
// the cluster's layout cannot be read. The tags are neither tenants' (32
// hex digits) nor the membership's.
func backstopTags(ctx context.Context, c *redis.ClusterClient) []string {
	if c == nil {
		return []string{"b0"}
	}
	slots, err := c.ClusterSlots(ctx).Result()
	if err != nil || len(slots) == 0 {
		return []string{"b0"}
	}
	owner := func(slot int64) string {
		for _, r := range slots {
			if int64(r.Start) <= slot && slot <= int64(r.End) && len(r.Nodes) > 0 {
				return r.Nodes[0].Addr
			}
		}
		return ""
	}
	masters := map[string]bool{}
	for _, r := range slots {
		if len(r.Nodes) > 0 {
			masters[r.Nodes[0].Addr] = false
		}
	}
	var tags []string
	for i := 0; i < 64*len(masters) && len(tags) < len(masters); i++ {
		tag := "b" + strconv.Itoa(i)
		slot, err := c.ClusterKeySlot(ctx, keyPrefix+tag+"}").Result()
		if err != nil {
			break
		}
		if m := owner(slot); m != "" && !masters[m] {
			masters[m] = true
			tags = append(tags, tag)
		}
	}
	if len(tags) == 0 {
		return []string{"b0"}
	}
	return tags
}

// take decides r at l. The error is for the failure policy (no
// reconciliation has succeeded yet).
func (b *syncBackstop) take(ctx context.Context, l fairshare.BackstopLimit, r fairshare.BackstopRequest) (fairshare.BackstopResult, error) {
	b.mu.Lock()
	synced := b.synced
	b.l = l
	b.mu.Unlock()
	if !synced {
		if err := b.reconcile(ctx); err != nil {
			return fairshare.BackstopResult{}, err
		}
	}
	// (Another take's first reconciliation may have run meanwhile: one
	// at a time, and each pushes what the last did not.)
	now := b.y.clock()
	n := b.y.n()
	b.mu.Lock()
	defer b.mu.Unlock()
	tau := l.Window.Seconds()
	t := b.tenants[r.Tenant]
	if t == nil {
		t = &backstopTenant{shard: b.shardOf(r.Tenant), at: now}
		b.tenants[r.Tenant] = t
	}
	t.weight = r.Weight
	t.asked += r.Cost
	b.lastUse = now
	tokens := b.tokensLocked(now, n)
	if now-b.levelAt >= int64(l.Window)/fairshare.LevelEvery || tokens < r.Cost && math.IsInf(b.level, 1) {
		b.recomputeLocked(now, n)
	}
	// What this instance admitted since the last pull stands for the
	// fleet's (× n): the others' admissions of the same interval are not
	// seen yet, and a flood spread over n instances would otherwise look
	// within its share n times as long, each instance lending it its part
	// of the reserve.
	use := t.admitted*fairshare.Decay(now-t.at, tau) + n*(t.took+t.pushTook)/tau
	paidFrom := tokens
	var res fairshare.BackstopResult
	tokens, t.owed, res = fairshare.JudgeOwing(l, l.Burst/n, tokens, t.owed, use, fairshare.ShareFor(l, b.level, b.weights, r.Weight), r)
	b.decisions++
	charged := paidFrom - tokens
	if res.Allowed {
		t.took += r.Cost
		charged += r.Cost
	}
	b.debitLocked(charged)
	return res, nil
}

// shardOf returns the shard of tenant: the same on every instance (FNV-1a
// of the ID), since the shard keeps the tenant's fleet rates.
func (b *syncBackstop) shardOf(tenant string) int {
	h := fnv.New64a()
	h.Write([]byte(tenant))
	return int(h.Sum64() % uint64(len(b.shards)))
}

// tokensLocked is what this instance may take from the bucket at now, n
// instances sharing it (see syncBackstop). b.mu must be held.
func (b *syncBackstop) tokensLocked(now int64, n float64) float64 {
	s := float64(len(b.shards))
	rate, burst := b.l.Rate/s, b.l.Burst/s
	interval := b.y.interval
	var tokens float64
	for i := range b.shards {
		sh := &b.shards[i]
		since := max(0, now-sh.syncedAt)
		if since < 2*interval {
			tokens += sh.g/n + rate*float64(min(since, interval))/1e9 - sh.taken - sh.pushing
			continue
		}
		tokens += min(burst/n, min(0, sh.g/n)+rate/n*float64(since)/1e9-sh.taken-sh.pushing)
	}
	return tokens
}

// recomputeLocked sets the fair level from the fleet's demands and this
// instance's since (standing for the fleet's, × n), and forgets the tenants with nothing left. b.mu must
// be held.
func (b *syncBackstop) recomputeLocked(now int64, n float64) {
	tau := b.l.Window.Seconds()
	ds := b.scratch[:0]
	b.weights = 0
	for id, t := range b.tenants {
		d := t.demand*fairshare.Decay(now-t.at, tau) + n*(t.asked+t.pushAsked)/tau // as use, in take
		if d < b.l.Rate*1e-6 {
			if t.asked == 0 && t.pushAsked == 0 && t.took == 0 && t.pushTook == 0 {
				delete(b.tenants, id)
			}
			continue
		}
		ds = append(ds, fairshare.Demand{Use: d, Weight: t.weight})
		b.weights += t.weight
	}
	b.level = fairshare.Level(fairshare.ShareOf*b.l.Rate, ds)
	b.levelAt = now
	b.scratch = ds[:0]
}

// reconcile pushes what this instance took and its tenants asked and
// took since the last reconciliation, and pulls every shard's part and
// tenants: one script call per shard, concurrently, each within its own
// deadline and through no breaker (as the buckets' reconciliations). It
// returns an error when no shard answered.
func (b *syncBackstop) reconcile(ctx context.Context) error {
	b.reconciling.Lock()
	defer b.reconciling.Unlock()
	type push struct {
		amount float64
		args   []any
		ids    []string
	}
	b.mu.Lock()
	l, n := b.l, b.y.n()
	if l.Rate <= 0 {
		b.mu.Unlock()
		return nil // no take yet
	}
	s := float64(len(b.shards))
	rate, burst := l.Rate/s, l.Burst/s
	debt := burst + 2*n*(rate*float64(b.y.interval)/1e9+burst)
	pushes := make([]push, len(b.shards))
	for i := range b.shards {
		sh := &b.shards[i]
		pushes[i].amount = sh.taken
		sh.pushing += sh.taken
		sh.taken = 0
		pushes[i].args = []any{rate, burst, pushes[i].amount, debt, l.Window.Microseconds(), l.Rate}
	}
	for id, t := range b.tenants {
		if t.asked == 0 && t.took == 0 {
			continue
		}
		p := &pushes[t.shard]
		p.args = append(p.args, id, t.asked, t.took, t.weight)
		p.ids = append(p.ids, id)
		t.pushAsked, t.pushTook, t.asked, t.took = t.pushAsked+t.asked, t.pushTook+t.took, 0, 0
	}
	b.mu.Unlock()

	replies := make([]any, len(b.shards))
	errs := make([]error, len(b.shards))
	var wg sync.WaitGroup
	for i := range b.shards {
		wg.Go(func() {
			c, cancel := context.WithTimeout(ctx, b.y.reconcileDeadline(1+len(pushes[i].ids)))
			defer cancel()
			replies[i], errs[i] = backstopSyncScript.Run(c, b.y.s.client, []string{b.shards[i].bucket, b.shards[i].table}, pushes[i].args...).Result()
		})
	}
	wg.Wait()

	now := b.y.clock()
	b.mu.Lock()
	defer b.mu.Unlock()
	var firstErr error
	answered := false
	for i := range b.shards {
		sh := &b.shards[i]
		sh.pushing -= pushes[i].amount
		var g float64
		var rows []backstopRow
		err := errs[i]
		if err == nil {
			g, rows, err = decodeBackstopSync(replies[i])
		}
		if err != nil {
			firstErr = cmp.Or(firstErr, err)
			sh.taken += pushes[i].amount // pushed again next time
			// The tenants' rates only weigh fairness and decay within a
			// window: what was not pushed is kept here, in the rates as
			// this instance saw them, and not pushed again (kept apart,
			// × n, it would make a tenant of a shard that is away look
			// ever busier).
			tau := l.Window.Seconds()
			for _, id := range pushes[i].ids {
				if t := b.tenants[id]; t != nil {
					k := fairshare.Decay(now-t.at, tau)
					t.demand, t.admitted, t.at = t.demand*k+t.pushAsked/tau, t.admitted*k+t.pushTook/tau, now
					t.pushAsked, t.pushTook = 0, 0
				}
			}
			continue
		}
		answered = true
		sh.g, sh.syncedAt = g, now
		for _, id := range pushes[i].ids {
			if t := b.tenants[id]; t != nil {
				t.pushAsked, t.pushTook = 0, 0
			}
		}
		for _, t := range b.tenants { // a tenant Redis forgot has no fleet rates
			if t.shard == i {
				t.demand, t.admitted, t.at = 0, 0, now
			}
		}
		for _, row := range rows {
			t := b.tenants[row.id]
			if t == nil {
				t = &backstopTenant{shard: i}
				b.tenants[row.id] = t
			}
			t.demand, t.admitted, t.weight, t.at = row.demand, row.admitted, row.weight, now
		}
	}
	if !answered {
		return fmt.Errorf("redisstore: backstop reconciliation: %w", firstErr)
	}
	b.synced = true
	b.recomputeLocked(now, n)
	return nil
}

// backstopRow is one tenant in a shard's reply.
type backstopRow struct {
	id                       string
	demand, admitted, weight float64
}

// decodeBackstopSync checks the shape of backstopsync.lua's reply.
func decodeBackstopSync(v any) (float64, []backstopRow, error) {
	a, ok := v.([]any)
	if !ok || len(a) < 2 || (len(a)-2)%4 != 0 {
		return 0, nil, fmt.Errorf("%w: backstop sync: %T, want {tokens, now, rows of 4}", errBadReply, v)
	}
	g, err := decodeDouble(a[0])
	if err != nil {
		return 0, nil, err
	}
	rows := make([]backstopRow, 0, (len(a)-2)/4)
	for i := 2; i < len(a); i += 4 {
		var row backstopRow
		if row.id, ok = a[i].(string); !ok {
			return 0, nil, fmt.Errorf("%w: backstop sync: tenant %T", errBadReply, a[i])
		}
		for j, p := range []*float64{&row.demand, &row.admitted, &row.weight} {
			s, ok := a[i+1+j].(string)
			f, err := strconv.ParseFloat(s, 64)
			if !ok || err != nil || math.IsNaN(f) {
				return 0, nil, fmt.Errorf("%w: backstop sync: %T %v", errBadReply, a[i+1+j], a[i+1+j])
			}
			*p = f
		}
		rows = append(rows, row)
	}
	return g, rows, nil
}

// reconcileBackstop runs the backstop's reconciliation of one interval,
// if the backstop was used in the last two.
func (y *syncer) reconcileBackstop() {
	y.backstopMu.Lock()
	b := y.backstop
	y.backstopMu.Unlock()
	if b == nil {
		return
	}
	// An idle backstop costs Redis nothing: after two intervals without
	// a take there is nothing to push, and the next take finds the shards
	// stale (each part a local one, up to burst/(S n)) until the next
	// interval reconciles them.
	b.mu.Lock()
	idle := y.clock()-b.lastUse > 2*y.interval
	b.mu.Unlock()
	if !idle {
		_ = b.reconcile(context.Background())
	}
}

// syncedBackstop returns the syncer's backstop, made on first use.
func (y *syncer) syncedBackstop(ctx context.Context) *syncBackstop {
	y.backstopMu.Lock()
	defer y.backstopMu.Unlock()
	if y.backstop == nil {
		y.backstop = newSyncBackstop(ctx, y)
	}
	return y.backstop
}
