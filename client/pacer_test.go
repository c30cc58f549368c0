package client

import (
	"math"
	"net/http"
	"testing"
	"time"
)

func TestQuotaEarliest(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(n float64) time.Time { return t0.Add(seconds(n / 1000)) }
	tests := []struct {
		name      string
		q         quota
		now, last time.Time
		want      time.Time // zero: no constraint
	}{
		{"never observed", quota{}, t0, t0, time.Time{}},
		{"reset passed", quota{at: t0, r: 0, t: 1}, ms(1000), t0, time.Time{}},
		{"spread 20 over 1 s", quota{at: t0, r: 20, t: 1}, t0, t0, ms(50)},
		{"spread from the last send", quota{at: t0, r: 20, t: 1}, t0, ms(30), ms(80)},
		{"spread what is left of the window", quota{at: t0, r: 10, t: 2}, ms(1000), ms(1000), ms(1100)},
		{"cost 5 spaced 5×", quota{at: t0, r: 20, t: 1, cost: 5}, t0, t0, ms(250)},
		{"short: wait for the refill", quota{at: t0, r: 0.5, t: 5, rate: 5}, t0, t0, ms(100)},
		{"short, no known rate: wait for the reset", quota{at: t0, r: 0, t: 3}, t0, t0, ms(3000)},
		{"reserved sends count", quota{at: t0, r: 12, t: 4, cost: 5, sent: 2}, t0, t0, ms(4000)},
		{"an absurd reset waits the longest, not overflows to now", quota{at: t0, r: 0, t: 1e300}, t0, t0, t0.Add(maxRetryAfter)},
		{"refill is capped at the limit", quota{at: t0, r: 24, t: 1.2, limit: 25, rate: 5}, ms(1000), ms(1000), ms(1000 + 200.0/25)},
	}
	for _, tt := range tests {
		got := tt.q.earliest(tt.now, tt.last)
		if d := got.Sub(tt.want); d < -time.Microsecond || d > time.Microsecond || got.IsZero() != tt.want.IsZero() {
			t.Errorf("%s: earliest = %v, want %v", tt.name, got.Sub(t0), tt.want.Sub(t0))
		}
	}
}

func TestQuotaLearnsCost(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	q := quota{limit: 25, rate: 5}
	q.observe(t0, 20, 1, true) // first observation: nothing to learn from
	if q.cost != 0 {
		t.Fatalf("cost %v before any drop was seen", q.cost)
	}
	// One send, 0.2 s later 1 token refilled and r fell to 16: cost 5.
	q.sent = 1
	q.observe(t0.Add(200*time.Millisecond), 16, 2, true)
	if q.cost != 5 {
		t.Fatalf("cost = %v, want 5", q.cost)
	}
	// A 429 teaches nothing (fairgate takes no tokens for it).
	q.sent = 1
	q.observe(t0.Add(300*time.Millisecond), 16, 2, false)
	if q.cost != 5 {
		t.Fatalf("cost after a 429 = %v, want 5", q.cost)
	}
	// Cheaper requests pull the estimate down, by a quarter of the gap each time.
	q.sent = 1
	q.observe(t0.Add(400*time.Millisecond), 16.5, 2, true) // 0.5 refilled, none taken: a drop of 0, clamped to the minimum 1
	if want := 5 + costEWMA*(1-5); math.Abs(q.cost-want) > 1e-9 {
		t.Fatalf("cost = %v, want %v", q.cost, want)
	}
	if q.sent != 0 || !q.at.Equal(t0.Add(400*time.Millisecond)) {
		t.Fatalf("observe did not reset the model: %+v", q)
	}
}

func TestPaceObserve(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := http.Header{}
	h.Set("RateLimit", `"tenant";r=20;t=1, "exports";r=3;t=4`)
	h.Set("RateLimit-Policy", `"tenant";q=25;w=5, "exports";q=10;w=10`)
	h.Set("RateLimit-Remaining", "3") // ignored: the structured field wins
	h.Set("RateLimit-Reset", "4")
	var p pace
	p.observe(t0, h, http.StatusOK, 0)
	if len(p.quotas) != 2 {
		t.Fatalf("quotas %+v, want tenant and exports", p.quotas)
	}
	if q := p.quotas[0]; q.name != "tenant" || q.r != 20 || q.t != 1 || q.limit != 25 || q.rate != 5 {
		t.Errorf("tenant quota %+v", q)
	}
	if q := p.quotas[1]; q.name != "exports" || q.r != 3 || q.t != 4 || q.limit != 10 || q.rate != 1 {
		t.Errorf("exports quota %+v", q)
	}

	// A 429 holds every send until its Retry-After.
	p.observe(t0, http.Header{}, http.StatusTooManyRequests, 2*time.Second)
	res, ok := p.reserve(t0, t0.Add(time.Minute))
	if !ok || !res.at.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("after a 429 with Retry-After 2s: reserve at %v, %v", res.at.Sub(t0), ok)
	}
	// A slot past the limit reserves nothing; cancel gives a slot back.
	if _, ok := p.reserve(t0, t0.Add(time.Second)); ok {
		t.Fatal("reserved a slot past the limit")
	}
	p.cancel(res)
	if p.quotas[0].sent != 0 || !p.last.IsZero() {
		t.Fatalf("cancel left sent=%d last=%v", p.quotas[0].sent, p.last)
	}

	// The trio alone, with an epoch reset.
	var p2 pace
	h2 := http.Header{}
	h2.Set("RateLimit-Limit", "100, 100;w=60")
	h2.Set("RateLimit-Remaining", "40")
	h2.Set("RateLimit-Reset", "1767225630") // t0 + 30 s as a Unix time
	p2.observe(t0, h2, http.StatusOK, 0)
	if len(p2.quotas) != 1 || p2.quotas[0].limit != 100 || p2.quotas[0].r != 40 || p2.quotas[0].t != 30 || p2.quotas[0].rate != 0 {
		t.Fatalf("trio quota %+v", p2.quotas)
	}
}
