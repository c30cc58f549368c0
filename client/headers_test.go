package client

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type item struct {
	Name, Params string
}

func items(s string) []item {
	var out []item
	it := sfItems{s}
	for {
		n, p, ok := it.next()
		if !ok {
			return out
		}
		out = append(out, item{n, p})
	}
}

func TestSFItems(t *testing.T) {
	tests := []struct {
		in   string
		want []item
	}{
		{``, nil},
		{`"tenant";r=20;t=1`, []item{{"tenant", ";r=20;t=1"}}},
		{`"tenant";r=20;t=1, "exports";r=3;t=4`, []item{{"tenant", ";r=20;t=1"}, {"exports", ";r=3;t=4"}}},
		{`default;q=100;w=60`, []item{{"default", ";q=100;w=60"}}},
		{` "a\"b";r=1;t=2 ,"c";r=0;t=0`, []item{{`a\"b`, ";r=1;t=2 "}, {"c", ";r=0;t=0"}}},
		{`"p";pk=:YWJj:;q=5;w=1;qu="a,b", "q";r=1`, []item{{"p", `;pk=:YWJj:;q=5;w=1;qu="a,b"`}, {"q", ";r=1"}}},
		{`"unterminated;r=1`, nil},
		{`"a";r=1, "b";x="unterminated`, []item{{"a", ";r=1"}}},
		{`,,, `, nil},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, items(tt.in)); diff != "" {
			t.Errorf("items(%q) (-want +got):\n%s", tt.in, diff)
		}
	}
}

func TestParam(t *testing.T) {
	tests := []struct {
		params, key string
		want        float64
		ok          bool
	}{
		{";r=20;t=1", "r", 20, true},
		{";r=20;t=1", "t", 1, true},
		{"; r=2.5 ;t=1", "r", 2.5, true},
		{";r=20", "t", 0, false},
		{";r=-1", "r", 0, false},
		{";r=inf", "r", 0, false},
		{";r=NaN", "r", 0, false},
		{";r", "r", 0, false},
		{";rr=3;r=4", "r", 4, true},
	}
	for _, tt := range tests {
		got, ok := param(tt.params, tt.key)
		if got != tt.want || ok != tt.ok {
			t.Errorf("param(%q, %q) = %v, %v; want %v, %v", tt.params, tt.key, got, ok, tt.want, tt.ok)
		}
	}
}

// FuzzRateLimitField checks that no RateLimit field, however malformed,
// makes the parser panic, loop or yield a negative or non-finite value, and
// that pacing from it never schedules a send in the past or beyond the
// longest wait.
func FuzzRateLimitField(f *testing.F) {
	f.Add(`"tenant";r=20;t=1, "exports";r=3;t=4`, `"tenant";q=25;w=5`)
	f.Add(`"tenant";r=0;t=1e300`, `"tenant";q=1e-300;w=1e300`)
	f.Add(`"a\"b;r=1`, ``)
	f.Add(`0 r=7;t=1e10`, `0`)
	f.Fuzz(func(t *testing.T, s, policy string) {
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		var p pace
		res, _ := p.reserve(t0, t0, 1)
		p.observe(t0, http.Header{hdrRateLimit: {s}, hdrRateLimitPolicy: {policy}}, http.StatusOK, 0, "", res)
		res, _ = p.reserve(t0, t0.Add(2*maxRetryAfter), 2)
		p.observe(t0.Add(time.Second), http.Header{hdrRateLimit: {s}}, http.StatusOK, 0, "", res)
		for i := range 3 {
			now := t0.Add(time.Duration(i+1) * time.Second)
			res, ok := p.reserve(now, now.Add(2*maxRetryAfter), uint64(i%3))
			if !ok || res.at.Before(now) || res.at.After(now.Add(maxRetryAfter)) {
				t.Fatalf("RateLimit %q, policy %q: send %d reserved at %v after now, ok %v", s, policy, i, res.at.Sub(now), ok)
			}
		}
		n := 0
		it := sfItems{s}
		for {
			_, params, ok := it.next()
			if !ok {
				break
			}
			if n++; n > len(s) {
				t.Fatalf("more items than bytes in %q", s)
			}
			for _, k := range []string{"r", "t", "q", "w"} {
				if v, ok := param(params, k); ok && !(v >= 0) {
					t.Fatalf("%s=%v from %q", k, v, s)
				}
			}
		}
	})
}
