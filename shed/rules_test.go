package shed

// without is the test-only constructor option of the negative controls:
// a Limiter built with it applies every rule but off (rules.go).
func without(off rule) LimiterOption {
	return func(l *Limiter) { l.rules &^= off }
}

// withoutIf is without(off) when cond holds, and no option otherwise.
func withoutIf(cond bool, off rule) LimiterOption {
	if !cond {
		return func(*Limiter) {}
	}
	return without(off)
}
