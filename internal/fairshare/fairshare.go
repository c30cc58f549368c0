// Package fairshare is the arithmetic of weighted max-min fair shares that
// fairgate's shared layers (the global backstop, the bulkhead pools'
// shedding) use to tell a tenant within its fair share from one above it.
//
// A layer of capacity C is shared by the tenants active in it. Their fair
// shares are weighted max-min: the level λ is the largest number such that
// Σ min(useᵢ, λ·wᵢ) ≤ C, and tenant i's share is λ·wᵢ. A tenant that uses
// less than λ·wᵢ leaves the rest to the others (work-conserving), so a tenant
// alone may use everything, and when the tenants together use no more than
// C nobody is above its share (λ is +Inf).
//
// Everything here is a pure function of the time passed in (Unix
// nanoseconds or any other monotonic count of nanoseconds); nothing reads a
// clock. Nothing is safe for concurrent use: callers hold their own lock.
package fairshare

import (
	"math"
	"slices"
)

// Demand is one tenant's use of a layer and its weight.
type Demand struct {
	// Use is what the tenant uses or asks for, in the layer's unit
	// (tokens a second, seats).
	Use float64
	// Weight is the tenant's weight; must be > 0.
	Weight float64
}

// Level returns the weighted max-min fair level λ of capacity among ds: the
// largest λ with Σ min(Use, λ·Weight) ≤ capacity, or +Inf when the uses add
// up to no more than capacity (nobody is above its share). It sorts ds in
// place (by Use/Weight) and allocates nothing. Entries with Weight ≤ 0 are
// ignored.
func Level(capacity float64, ds []Demand) float64 {
	slices.SortFunc(ds, func(a, b Demand) int {
		x, y := ratio(a), ratio(b)
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
		return 0
	})
	remaining, weights := capacity, 0.0
	for _, d := range ds {
		if d.Weight > 0 {
			weights += d.Weight
		}
	}
	for _, d := range ds {
		if d.Weight <= 0 {
			continue
		}
		// Every tenant from here on uses at least ratio(d) per weight.
		if lambda := remaining / weights; ratio(d) > lambda {
			return max(lambda, 0)
		}
		remaining -= d.Use
		weights -= d.Weight
	}
	return math.Inf(1)
}

func ratio(d Demand) float64 {
	if d.Weight <= 0 {
		return math.Inf(1)
	}
	return d.Use / d.Weight
}

// Decay is the factor by which a rate of time constant tau (seconds)
// falls over dt ns (1 for dt ≤ 0).
func Decay(dt int64, tau float64) float64 {
	if dt <= 0 {
		return 1
	}
	return math.Exp(-float64(dt) / 1e9 / tau)
}

// Rate is an exponentially decayed event rate (per second) with time
// constant Tau seconds: an event of size x adds x/Tau, and the value decays
// by e^(−t/Tau). A steady stream of r a second converges to r. The zero
// value is a rate of zero.
type Rate struct {
	v  float64
	at int64
}

// At returns the rate at now.
func (r Rate) At(now int64, tau float64) float64 { return r.v * Decay(now-r.at, tau) }

// Add records an event of size x at now.
func (r *Rate) Add(now int64, tau, x float64) {
	r.v = r.At(now, tau) + x/tau
	r.at = max(r.at, now)
}

// advance decays r to now and stores it.
func (r *Rate) advance(now int64, tau float64) float64 {
	r.v = r.At(now, tau)
	r.at = max(r.at, now)
	return r.v
}

// Occupancy is an exponentially weighted time average of a level (requests
// in flight or queued): with the level held at n the average moves towards n
// with time constant Tau seconds. It tells a tenant that holds a seat now
// and then from one that holds several all the time. The zero value is an
// empty level that has always been empty.
type Occupancy struct {
	avg float64
	n   int
	at  int64
}

// Set changes the level to n at now.
func (o *Occupancy) Set(now int64, tau float64, n int) {
	o.avg = o.At(now, tau)
	o.n = n
	o.at = max(o.at, now)
}

// Level is the current level (the last n Set).
func (o *Occupancy) Level() int { return o.n }

// At returns the average at now.
func (o *Occupancy) At(now int64, tau float64) float64 {
	n := float64(o.n)
	return n + (o.avg-n)*Decay(now-o.at, tau)
}
