package fairshare

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// refLevel is λ by bisection, straight from the definition: the largest λ
// with Σ min(use, λ·w) ≤ capacity.
func refLevel(capacity float64, ds []Demand) float64 {
	var total float64
	for _, d := range ds {
		total += d.Use
	}
	if total <= capacity {
		return math.Inf(1)
	}
	lo, hi := 0.0, 1.0
	sum := func(l float64) float64 {
		s := 0.0
		for _, d := range ds {
			s += min(d.Use, l*d.Weight)
		}
		return s
	}
	for sum(hi) < capacity {
		hi *= 2
	}
	for range 200 {
		mid := (lo + hi) / 2
		if sum(mid) <= capacity {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo
}

func TestLevel(t *testing.T) {
	for _, tc := range []struct {
		name     string
		capacity float64
		ds       []Demand
		want     float64
	}{
		{"nobody over", 100, []Demand{{50, 1}, {40, 1}}, math.Inf(1)},
		{"alone takes everything", 100, []Demand{{500, 1}}, 100},
		{"light share redistributed", 100, []Demand{{100, 1}, {20, 1}, {5, 1}}, 75},
		{"two heavy split the rest", 100, []Demand{{100, 1}, {100, 1}, {10, 1}}, 45},
		{"weights", 90, []Demand{{100, 2}, {100, 1}}, 30},
		{"zero weight ignored", 10, []Demand{{100, 0}, {100, 1}}, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Level(tc.capacity, append([]Demand(nil), tc.ds...)); math.Abs(got-tc.want) > 1e-9 && got != tc.want {
				t.Errorf("Level = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestLevelMatchesDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for i := range 500 {
		n := 1 + rng.IntN(20)
		ds := make([]Demand, n)
		for j := range ds {
			ds[j] = Demand{Use: rng.Float64() * 100, Weight: 0.1 + rng.Float64()*5}
		}
		capacity := rng.Float64() * 600
		want := refLevel(capacity, ds)
		got := Level(capacity, append([]Demand(nil), ds...))
		if math.IsInf(want, 1) != math.IsInf(got, 1) || !math.IsInf(want, 1) && math.Abs(got-want) > 1e-6*max(1, want) {
			t.Fatalf("case %d: Level = %v, want %v (%v, capacity %v)", i, got, want, ds, capacity)
		}
	}
}

func TestRateConverges(t *testing.T) {
	var r Rate
	const tau = 1.0
	now := int64(0)
	for range 10000 { // 10 s of 100 events a second of size 2
		now += int64(10 * time.Millisecond)
		r.Add(now, tau, 2)
	}
	if got := r.At(now, tau); math.Abs(got-200) > 2 {
		t.Errorf("rate = %v, want about 200", got)
	}
	if got := r.At(now+int64(time.Second), tau); math.Abs(got-200/math.E) > 2 {
		t.Errorf("rate 1 s later = %v, want about %v", got, 200/math.E)
	}
}

func TestOccupancy(t *testing.T) {
	var o Occupancy
	o.Set(0, 1, 4)
	if got := o.At(int64(10*time.Second), 1); math.Abs(got-4) > 0.01 {
		t.Errorf("after 10 tau at 4: %v", got)
	}
	o.Set(int64(10*time.Second), 1, 0)
	if got := o.At(int64(11*time.Second), 1); math.Abs(got-4/math.E) > 0.01 {
		t.Errorf("1 tau after dropping to 0: %v, want %v", got, 4/math.E)
	}
}
