package bulkhead

import (
	"math"
	"time"

	"github.com/fairgate/fairgate/internal/fairshare"
)

// UsageWindow is the time constant of a tenant's use of a pool: the
// average number of its requests holding the pool's seats or queued for
// them over about the last second. A tenant that holds a seat now and then
// uses a fraction of one; a flood holds several all the time.
const UsageWindow = time.Second

// usageTau is UsageWindow in seconds.
var usageTau = UsageWindow.Seconds()

// ShareState is one tenant's use of a pool against its fair share of the
// pool's seats.
type ShareState struct {
	// Use is the tenant's requests holding the pool's seats or queued for
	// them: their average over about UsageWindow, or the count now if
	// higher (a flood is above its share from its first queued requests,
	// not a window later).
	Use float64
	// Share is the tenant's weighted max-min fair share of the pool's
	// seats among the tenants using it; +Inf when their uses add up to no
	// more than the seats.
	Share float64
	// Within reports Use ≤ Share: the tenant is not the reason the pool
	// is short of seats.
	Within bool
}

// Share reports tenant's use of the named pool against its fair share.
// The fair level is recomputed from every tenant's use at most every
// UsageWindow/50. Unknown pools and tenants never seen are within share.
func (ps *Pools) Share(pool, tenant string) ShareState {
	p := ps.byName[pool]
	if p == nil {
		return ShareState{Share: math.Inf(1), Within: true}
	}
	now := ps.nanos(time.Now())
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.shareLevelLocked(p, now)
	u := p.users[tenant]
	if u == nil {
		return ShareState{Share: p.level, Within: true}
	}
	st := ShareState{Use: useOf(u, now), Share: p.level * u.weight}
	st.Within = st.Use <= st.Share
	return st
}

// shareLevelLocked recomputes p's fair level at now if it is due. ps.mu
// must be held.
func (ps *Pools) shareLevelLocked(p *pool, now int64) {
	if now-p.levelAt >= int64(UsageWindow)/fairshare.LevelEvery || now < p.levelAt {
		ps.recomputeLocked(p, now)
	}
}

// withinLocked reports whether tenant is within its fair share of p at now,
// by the level last computed. ps.mu must be held.
func (ps *Pools) withinLocked(p *pool, tenant string, now time.Time) bool {
	u := p.users[tenant]
	return u == nil || useOf(u, ps.nanos(now)) <= p.level*u.weight
}

// recomputeLocked sets p's fair level from its users' use at now, and
// forgets the users with nothing held or queued and a use decayed to
// nothing. ps.mu must be held.
func (ps *Pools) recomputeLocked(p *pool, now int64) {
	ds := p.scratch[:0]
	for id, u := range p.users {
		use := useOf(u, now)
		if u.use.Level() == 0 && use < 1e-3 {
			delete(p.users, id)
			continue
		}
		ds = append(ds, fairshare.Demand{Use: use, Weight: u.weight})
	}
	p.level = fairshare.Level(float64(p.nominal+p.borrowed), ds)
	p.levelAt = now
	p.scratch = ds[:0]
}

// useOf is u's use at now: its average over about UsageWindow.
func useOf(u *poolUser, now int64) float64 {
	return u.use.At(now, usageTau)
}

// useLocked changes the count of r's tenant's requests held or queued in
// p by delta at now. ps.mu must be held.
func (ps *Pools) useLocked(p *pool, r *Request, now time.Time, delta int) {
	u := p.users[r.Tenant]
	if u == nil {
		u = &poolUser{}
		p.users[r.Tenant] = u
	}
	u.weight = r.Weight
	u.use.Set(ps.nanos(now), usageTau, u.use.Level()+delta)
}

// useOfLocked is useLocked for a tenant whose entry exists (it holds a
// seat). ps.mu must be held.
func (ps *Pools) useOfLocked(p *pool, tenant string, now time.Time, delta int) {
	if u := p.users[tenant]; u != nil {
		u.use.Set(ps.nanos(now), usageTau, u.use.Level()+delta)
	}
}

// nanos is t as monotonic nanoseconds since the pools were built.
func (ps *Pools) nanos(t time.Time) int64 { return int64(t.Sub(ps.epoch)) }
