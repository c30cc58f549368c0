package admission

import (
	"context"
	"errors"
	"maps"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/bulkhead"
	"github.com/fairgate/fairgate/shed"
	"github.com/fairgate/fairgate/tenant"
)

// Reload checks cfg and reg and, when both are good, makes them the gate's
// configuration for every request decided from now on. On error the old
// configuration stays. Buckets are kept: a changed quota applies to the
// tokens a tenant already has, and never refills them.
//
// With a shared store (Redis), the buckets whose new limit is full later
// than their old one (the global backstop's too) are relimited in the
// store, within ctx. If that
// fails, the new configuration is in force all the same (it is not undone
// for a store's trouble): the failure is logged, and those buckets may come
// back full at the instant they would have been full under their old
// limit.
func (g *Gate) Reload(ctx context.Context, cfg Config, reg *tenant.Registry) error {
	if reg == nil {
		return errors.New("admission: nil tenant registry")
	}
	c, err := cfg.compile(reg)
	if err != nil {
		return err
	}
	if err := g.checkStore(c); err != nil {
		return err
	}
	old, err := g.swapConfig(cfg, c)
	if err != nil {
		return err
	}
	// Outside reloadMu: the round trips must not hold up the admin view.
	// Two reloads' relimits may cross; a key's expiry only ever moves
	// later, so the last reload's limits still hold.
	if s, ok := g.store.(sharedRelimiter); ok {
		if changed := c.laterFull(old); len(changed) > 0 {
			if err := s.Relimit(ctx, changed); err != nil {
				g.log.Warn("admission: reload: buckets whose rate went down may come back full early", "buckets", len(changed), "err", err.Error())
			}
		}
	}
	if s, ok := g.store.(backstopRelimiter); ok && c.global != nil && old.global != nil &&
		(c.global.Rate < old.global.Rate || c.global.Burst > old.global.Burst) {
		if err := s.RelimitBackstop(ctx, *c.global); err != nil {
			g.log.Warn("admission: reload: the global backstop, whose rate went down, may come back full early", "err", err.Error())
		}
	}
	return nil
}

// swapConfig makes c (compiled from cfg) the gate's configuration if the
// stateful layers can follow it, and returns the configuration it
// replaced.
func (g *Gate) swapConfig(cfg Config, c *compiled) (*compiled, error) {
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	if err := g.checkLayerChange(cfg); err != nil {
		return nil, err
	}
	old := g.cfg.Swap(c)
	g.layerCfg = layerConfig{Bulkhead: cfg.Bulkhead, Adaptive: cfg.Adaptive, Shedding: cfg.Shedding}
	if g.pools != nil && g.limiter == nil {
		g.pools.SetTotal(cfg.Bulkhead.Total) // seated requests keep their seats
	}
	// A quota change must not refill a bucket: a store that forgets full
	// buckets learns the new limits, so it forgets them when they are full
	// under those. (Under reloadMu: it sets each bucket's instant, so the
	// last reload's limits must come last.)
	if s, ok := g.store.(relimiter); ok {
		s.Relimit(c.limitOf)
	}
	g.unauth.Relimit(c.unauthLimitOf)
	return old, nil
}

// relimiter is a store that forgets full buckets and must hear of new
// limits (ratelimit.MemoryStore).
type relimiter interface {
	Relimit(limitOf func(ratelimit.BucketKey) (ratelimit.Limit, bool))
}

// sharedRelimiter is a store whose buckets expire when full and that must
// hear of the buckets whose limit changed (redisstore.Store): it cannot
// walk its buckets as the embedded store does, and needs not, since the
// configuration names every bucket that can have changed.
type sharedRelimiter interface {
	Relimit(ctx context.Context, limits map[ratelimit.BucketKey]ratelimit.Limit) error
}

// backstopRelimiter is a shared store whose global backstop expires when
// full (redisstore.Store).
type backstopRelimiter interface {
	RelimitBackstop(ctx context.Context, l ratelimit.BackstopLimit) error
}

// laterFull returns the rate-layer buckets of c (each tenant's own and its
// groups') that a bucket under old's limit would leave expiring before it is
// full: a lower rate, a larger burst, or a limit old did not have.
func (c *compiled) laterFull(old *compiled) map[ratelimit.BucketKey]ratelimit.Limit {
	out := map[ratelimit.BucketKey]ratelimit.Limit{}
	add := func(k ratelimit.BucketKey, l ratelimit.Limit) {
		if was, ok := old.limitOf(k); !ok || l.Rate < was.Rate || l.Burst > was.Burst {
			out[k] = l
		}
	}
	for _, t := range c.reg.Tenants() {
		add(ratelimit.BucketKey{Tenant: t.ID}, ratelimit.Limit{Rate: t.Rate, Burst: t.Burst})
		for g, q := range t.Groups {
			add(ratelimit.BucketKey{Tenant: t.ID, Scope: g}, ratelimit.Limit{Rate: q.Rate, Burst: q.Burst})
		}
	}
	return out
}

// limitOf returns the limit of a rate-layer bucket under c: the global
// backstop, a tenant's own bucket, or a tenant's group bucket.
func (c *compiled) limitOf(k ratelimit.BucketKey) (ratelimit.Limit, bool) {
	if k.Tenant == "" {
		// The global backstop is no bucket of the store's: it takes its
		// limit with every request.
		return ratelimit.Limit{}, false
	}
	t, ok := c.reg.ByID(k.Tenant)
	if !ok {
		return ratelimit.Limit{}, false
	}
	if k.Scope == "" {
		return ratelimit.Limit{Rate: t.Rate, Burst: t.Burst}, true
	}
	q, ok := t.Groups[k.Scope]
	return ratelimit.Limit{Rate: q.Rate, Burst: q.Burst}, ok
}

// unauthLimitOf returns the limit of a per-IP bucket under c.
func (c *compiled) unauthLimitOf(k ratelimit.BucketKey) (ratelimit.Limit, bool) {
	switch k.Scope {
	case scopeUnauthenticated:
		return c.unauth, true
	case scopeAnonymous:
		return c.anon, true
	}
	return ratelimit.Limit{}, false
}

// layerConfig is the part of Config that built the stateful layers.
type layerConfig struct {
	Bulkhead *bulkhead.Config
	Adaptive *shed.AdaptiveConfig
	Shedding *shed.SheddingConfig
}

// checkLayerChange accepts a reload only if the stateful layers can follow
// it without being rebuilt: the same pools with the same settings (the
// total may change), the same adaptive and shedding settings. Anything
// else needs a restart, and the reload is refused so that the old config
// stays whole.
func (g *Gate) checkLayerChange(cfg Config) error {
	old := g.layerCfg
	if (old.Bulkhead == nil) != (cfg.Bulkhead == nil) {
		return errors.New("bulkhead: adding or removing the bulkhead section needs a restart")
	}
	if old.Bulkhead != nil && !maps.Equal(old.Bulkhead.Pools, cfg.Bulkhead.Pools) {
		return errors.New("bulkhead.pools: changing pools needs a restart (bulkhead.total can change on reload)")
	}
	if !equalPtr(old.Adaptive, cfg.Adaptive) {
		return errors.New("adaptive: changing the adaptive limit needs a restart")
	}
	if !equalPtr(old.Shedding, cfg.Shedding) {
		return errors.New("shedding: changing shedding needs a restart")
	}
	return nil
}

func equalPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}
