package client_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/fairgate/fairgate/client"
)

// offer is a caller that wants to send GET url+paths[i%len(paths)] every
// `every` for dur of virtual time, one request at a time: when the
// transport holds a request back, the caller falls behind its schedule
// and sends the next one as soon as it may.
func offer(t *testing.T, c *http.Client, clk *virtualClock, url string, paths []string, every, dur time.Duration) (ok, failed int) {
	t.Helper()
	start := clk.Now()
	for i := 0; ; i++ {
		due := start.Add(time.Duration(i) * every)
		if now := clk.Now(); due.After(now) {
			clk.Sleep(context.Background(), due.Sub(now))
		}
		if !clk.Now().Before(start.Add(dur)) {
			return ok, failed
		}
		status, err := get(context.Background(), c, url+paths[i%len(paths)])
		switch {
		case status == http.StatusOK:
			ok++
		case errors.As(err, new(*client.RejectedError)):
			failed++
		default:
			t.Fatalf("%d, %v", status, err)
		}
	}
}

// TestPacingKeepsUnderQuota offers three times a token bucket's quota. A
// paced client gets no 429 at all and still uses (nearly) all of its
// quota; the negative control, the same client without pacing, runs into
// 429s.
func TestPacingKeepsUnderQuota(t *testing.T) {
	const burst, rate = 25, 5 // fairgate's starter tier: 25 tokens, 5 a second
	const dur = 120 * time.Second
	costs := map[string]float64{"/cheap": 1, "/search": 5}
	tests := []struct {
		name     string
		trioOnly bool
		paths    []string
	}{
		{"cost 1", false, []string{"/cheap"}},
		{"cost 5", false, []string{"/search"}},
		{"mixed costs", false, []string{"/cheap", "/search"}},
		{"cost 1, trio only", true, []string{"/cheap"}},
		{"cost 5, trio only", true, []string{"/search"}},
	}
	for _, tt := range tests {
		var cost float64
		for _, p := range tt.paths {
			cost += costs[p] / float64(len(tt.paths))
		}
		every := time.Duration(float64(time.Second) * cost / rate / 3) // 3× the quota
		for _, paced := range []bool{true, false} {
			t.Run(pacedName(tt.name, paced), func(t *testing.T) {
				clk := newVirtualClock()
				up := &tokenBucket{clock: clk, burst: burst, rate: rate, trioOnly: tt.trioOnly, costs: costs}
				c, tr := newClient(t, clk, client.Config{DisablePacing: !paced})
				okN, failed := offer(t, c, clk, serve(t, up), tt.paths, every, dur)
				admitted, limited, units := up.counts()
				t.Logf("%d ok, %d failed; upstream: %d admitted, %d 429s, %.0f units; stats %+v", okN, failed, admitted, limited, units, tr.Stats())
				judgePacing(t, paced, admitted, limited, failed, units, rate*dur.Seconds())
			})
		}
	}
}

// pacedName names a subtest of a paced run or of its negative control.
func pacedName(name string, paced bool) string {
	if paced {
		return name
	}
	return name + ", not paced (control)"
}

// judgePacing judges a run offering three times a quota of `quota` units:
// paced, it must meet no 429 and no failure and still use 90 % of the
// quota; unpaced (the negative control), 429s must come back for at least
// a tenth of the admitted requests, or the run never reached the quota.
func judgePacing(t *testing.T, paced bool, admitted, limited, failed int, units, quota float64) {
	t.Helper()
	if !paced {
		if limited < admitted/10 {
			t.Fatalf("without pacing only %d 429s for %d admitted: the control does not reach the quota", limited, admitted)
		}
		return
	}
	if limited != 0 || failed != 0 {
		t.Fatalf("paced: %d 429s and %d failed requests, want none", limited, failed)
	}
	if units < 0.9*quota {
		t.Fatalf("paced: used %.0f units of a quota of %.0f: pacing is too timid", units, quota)
	}
}
