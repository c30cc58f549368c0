package admission

import (
	"errors"
	"maps"

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
	return nil
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
