package admission

import (
	"testing"

	"github.com/fairgate/fairgate/tenant"
)

// newGateWithout is the test-only constructor of the shedding layer's
// negative controls: New, with the shedding rules off switched off (nothing
// runs before New returns).
func newGateWithout(t *testing.T, cfg Config, reg *tenant.Registry, o Options, off gateRule) *Gate {
	t.Helper()
	g, err := New(cfg, reg, o)
	if err != nil {
		t.Fatal(err)
	}
	g.rules &^= off
	return g
}

// offIf is off when cond holds, else no rule.
func offIf(cond bool, off gateRule) gateRule {
	if cond {
		return off
	}
	return 0
}
