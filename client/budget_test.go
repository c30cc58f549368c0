package client

import (
	"testing"
	"time"
)

func TestBudget(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(seconds(s)) }
	type step struct {
		at       float64 // seconds after t0
		requests int     // deposits first
		retries  int     // then withdrawals tried
		want     int     // of which allowed
	}
	tests := []struct {
		name  string
		cfg   BudgetConfig
		steps []step
	}{
		{"ratio only", BudgetConfig{Ratio: 0.1, Window: 10 * time.Second}, []step{
			{0, 9, 1, 0},  // 0.9 retries: not one whole
			{0, 1, 5, 1},  // 10 requests: one retry
			{1, 20, 5, 2}, // 30 requests: three in all
		}},
		{"reserve without requests", BudgetConfig{Ratio: 0.1, MinPerSecond: 0.5, Window: 10 * time.Second}, []step{
			{0, 0, 10, 5}, // 0.5/s × 10 s
			{5, 0, 1, 0},  // spent until they leave the window
		}},
		{"recovers as the window slides", BudgetConfig{Ratio: 0.5, Window: 10 * time.Second}, []step{
			{0, 10, 10, 5},
			{5, 0, 1, 0},
			{10.5, 0, 1, 0}, // the requests left with the retries
			{11, 4, 4, 2},
		}},
		{"a clock that goes back counts in the newest slot", BudgetConfig{Ratio: 1, Window: 10 * time.Second}, []step{
			{5, 1, 0, 0},
			{1, 0, 2, 1},
		}},
		{"a long gap clears the ring", BudgetConfig{Ratio: 1, Window: time.Second}, []step{
			{0, 3, 3, 3},
			{1e6, 0, 1, 0},
			{1e6, 1, 1, 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.cfg
			if c.MinPerSecond == 0 {
				c.MinPerSecond = -1 // none: these cases are about the ratio
			}
			b := newBudget(Config{Budget: c}.withDefaults().Budget)
			for i, s := range tt.steps {
				for range s.requests {
					b.deposit(at(s.at))
				}
				got := 0
				for range s.retries {
					if b.withdraw(at(s.at)) {
						got++
					}
				}
				if got != s.want {
					t.Fatalf("step %d at %vs: %d of %d retries allowed, want %d", i, s.at, got, s.retries, s.want)
				}
			}
		})
	}
}

// TestBudgetBound checks the budget's promise over a long run: retries
// never exceed Ratio × requests + MinPerSecond × (duration + Window).
func TestBudgetBound(t *testing.T) {
	cfg := Config{Budget: BudgetConfig{Ratio: 0.1, MinPerSecond: 1, Window: 10 * time.Second}}.withDefaults().Budget
	b := newBudget(cfg)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var reqs, rets int
	const dur = 300 * time.Second
	for ms := time.Duration(0); ms < dur; ms += 20 * time.Millisecond {
		b.deposit(t0.Add(ms))
		reqs++
		for range 3 { // a client that would retry everything three times
			if b.withdraw(t0.Add(ms)) {
				rets++
			}
		}
	}
	bound := cfg.Ratio*float64(reqs) + cfg.MinPerSecond*(dur+cfg.Window).Seconds()
	if float64(rets) > bound {
		t.Fatalf("%d retries for %d requests, above the bound %v", rets, reqs, bound)
	}
	if float64(rets) < 0.9*cfg.Ratio*float64(reqs) {
		t.Fatalf("%d retries for %d requests: the budget is far stingier than its ratio", rets, reqs)
	}
}
