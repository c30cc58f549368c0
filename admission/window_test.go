package admission

import (
	"testing"
	"time"
)

func TestMinuteCountersForgetAfterAMinute(t *testing.T) {
	var m minuteCounters
	t0 := time.Unix(1_000_000, 0)
	m.add(t0, int(LayerRate), 3)
	m.add(t0.Add(500*time.Millisecond), int(LayerRate), 1)
	m.add(t0.Add(30*time.Second), int(LayerShed), 2)
	if got := m.sums(t0.Add(59 * time.Second)); got[LayerRate] != 4 || got[LayerShed] != 2 {
		t.Fatalf("after 59s: rate %d, shed %d; want 4, 2", got[LayerRate], got[LayerShed])
	}
	if got := m.sums(t0.Add(60 * time.Second)); got[LayerRate] != 0 || got[LayerShed] != 2 {
		t.Fatalf("after 60s: rate %d, shed %d; want 0, 2", got[LayerRate], got[LayerShed])
	}
	// The slot of t0 is reused 60 s later and starts from zero.
	m.add(t0.Add(60*time.Second), int(LayerRate), 1)
	if got := m.sums(t0.Add(60 * time.Second)); got[LayerRate] != 1 {
		t.Fatalf("reused slot: rate %d, want 1", got[LayerRate])
	}
}

func BenchmarkMinuteCountersAdd(b *testing.B) {
	b.ReportAllocs()
	var m minuteCounters
	now := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.add(now, int(LayerRate), 1)
		}
	})
}
