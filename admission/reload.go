package admission

import (
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
// tokens a tenant already has.
func (g *Gate) Reload(cfg Config, reg *tenant.Registry) error {
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
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	if err := g.checkLayerChange(cfg); err != nil {
		return err
	}
	g.cfg.Store(c)
	g.layerCfg = layerConfig{Bulkhead: cfg.Bulkhead, Adaptive: cfg.Adaptive, Shedding: cfg.Shedding}
	if g.pools != nil && g.limiter == nil {
		g.pools.SetTotal(cfg.Bulkhead.Total) // seated requests keep their seats
	}
	// A quota change must not refill a bucket: a store that forgets full
	// buckets learns the new limits, so it forgets them when they are full
	// under those.
	if s, ok := g.store.(relimiter); ok {
		s.Relimit(c.limitOf)
	}
	g.unauth.Relimit(c.unauthLimitOf)
	return nil
}

// relimiter is a store that forgets full buckets and must hear of new
// limits (ratelimit.MemoryStore).
type relimiter interface {
	Relimit(limitOf func(ratelimit.BucketKey) (ratelimit.Limit, bool))
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
