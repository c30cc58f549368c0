package bulkhead

// without is the test-only constructor option of the negative controls:
// Pools built with it apply every rule but off (rules.go).
func without(off rule) Option {
	return func(ps *Pools) { ps.rules &^= off }
}

// withoutIf is without(off) when cond holds, and no option otherwise.
func withoutIf(cond bool, off rule) Option {
	if !cond {
		return func(*Pools) {}
	}
	return without(off)
}
