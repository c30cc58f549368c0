package admission

import (
	"testing"
	"time"
)

// The critical reserve follows the critical requests' time-averaged use:
// one permit for the first one, U + 2√U + 1 while they hold some, and
// nothing once they have been gone for long.
func TestCriticalReserveFollowsCriticalUse(t *testing.T) {
	var r criticalReserve
	if r.size() != 0 {
		t.Fatalf("no critical request yet: reserve %d, want 0", r.size())
	}
	s := int64(time.Second)
	r.add(0, +1)
	if r.size() != 1 {
		t.Errorf("one critical request just started: reserve %d, want 1", r.size())
	}
	r.add(0, +1)
	r.add(0, +1)
	r.refresh(10 * s) // three held for 10 s: U ≈ 3, 3 + 2√3 = 6.5
	if got := r.size(); got != 8 {
		t.Errorf("three held for 10 s: reserve %d, want 8 (⌈3 + 2√3⌉ + 1)", got)
	}
	for range 3 {
		r.add(10*s, -1)
	}
	r.refresh(30 * s)
	if r.size() != 0 {
		t.Errorf("20 s after the last one: reserve %d, want 0", r.size())
	}
}
