package admission

import (
	"github.com/fairgate/fairgate/bulkhead"
	"github.com/fairgate/fairgate/shed"
)

// buildLayers builds the bulkhead pools, the adaptive limiter and the
// shedders from a config compile has checked.
func (g *Gate) buildLayers(cfg Config) error {
	if cfg.Bulkhead != nil {
		// The pools divide the adaptive limit: a request that finds
		// every seat it may reach taken presses it (OnShort). g.limiter
		// is built below, before any request.
		pools, err := bulkhead.NewPools(*cfg.Bulkhead, bulkhead.OnShort(func() {
			if g.limiter != nil {
				g.limiter.Press()
			}
		}))
		if err != nil {
			return err
		}
		g.pools = pools
	}
	if cfg.Bulkhead == nil && cfg.Adaptive != nil {
		fair, err := bulkhead.NewPools(bulkhead.Config{Total: max(cfg.Adaptive.Initial, 1), Pools: map[string]bulkhead.PoolConfig{fairPool: {Share: 1}}},
			bulkhead.OnShort(func() {
				if g.limiter != nil {
					g.limiter.Press()
				}
			}))
		if err != nil {
			return err
		}
		g.fair = fair
	}
	if cfg.Adaptive != nil {
		var opts []shed.LimiterOption
		switch {
		case g.pools != nil:
			opts = append(opts, shed.OnLimitChange(g.pools.SetTotal))
		case g.fair != nil:
			opts = append(opts, shed.OnLimitChange(g.fair.SetTotal))
		}
		l, err := shed.NewLimiter(*cfg.Adaptive, opts...)
		if err != nil {
			return err
		}
		g.limiter = l
		if g.pools != nil {
			g.pools.SetTotal(l.Limit())
		}
		if g.fair != nil {
			g.fair.SetTotal(l.Limit())
		}
	}
	sc := shed.SheddingConfig{}
	if cfg.Shedding != nil {
		sc = *cfg.Shedding
	}
	if sc.Disabled || g.pools == nil && g.limiter == nil {
		return nil
	}
	newShed := func(queueCap int) (*poolShed, error) {
		s, err := shed.NewShedder(sc)
		if err != nil {
			return nil, err
		}
		every := sc.CalibrationInterval
		if every == 0 {
			every = shed.DefaultCalibrationInterval
		}
		return &poolShed{shedder: s, queueCap: queueCap, every: int64(every / 20)}, nil
	}
	g.shedders = map[string]*poolShed{}
	if g.pools == nil {
		if g.limiter != nil {
			g.reserve = &criticalReserve{}
		}
		ps, err := newShed(0)
		if err != nil {
			return err
		}
		g.shedders[""] = ps
		return nil
	}
	for name, pc := range cfg.Bulkhead.Pools {
		ps, err := newShed(pc.QueueLength)
		if err != nil {
			return err
		}
		g.shedders[name] = ps
	}
	return nil
}
