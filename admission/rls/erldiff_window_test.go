package rls_test

import (
	"strconv"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// The fixed pass of the differential test: fairgate under rls.window:
// fixed counts in ERL's windows, so the model keeps each bucket as a
// window's count (exact, no refill) and predicts duration_until_reset as
// ERL computes it.

// withResets adds each status's duration_until_reset to f, the fields of
// resp: "status[i].duration_until_reset", whole seconds rounded up (ERL's
// are whole), "-" when the status has none.
func withResets(f fields, resp *rlsv3.RateLimitResponse) fields {
	if resp == nil {
		return f
	}
	for i, st := range resp.Statuses {
		v := "-"
		if d := st.GetDurationUntilReset(); d != nil {
			s := d.Seconds
			if d.Nanos > 0 {
				s++
			}
			v = strconv.FormatInt(s, 10)
		}
		f["status["+strconv.Itoa(i)+"].duration_until_reset"] = v
	}
	return f
}

// windowReset is the duration_until_reset of limit l, in whole seconds,
// for a call at start: to the end of the window of l's length (an
// override's times its multiplier, which ERL ignores) that holds start,
// as ERL computes its own (unit − now mod unit).
func windowReset(l *limit, start time.Time) string {
	w := int64(l.window)
	if w <= 0 {
		return "-"
	}
	return strconv.FormatInt(w-start.Unix()%w, 10)
}

// resetPred predicts a status's duration_until_reset from the prediction
// of its current_limit: absent where that is, for the same reasons; else
// value, for why (none: it is ERL's).
func resetPred(lim pred, value string, why ...string) pred {
	if len(lim.alts) > 0 {
		alts := make([]pred, len(lim.alts))
		for i, a := range lim.alts {
			alts[i] = resetPred(a, value, why...)
		}
		return oneOf(alts...)
	}
	p := exact(value, why...)
	if lim.want == "-" {
		p = exact("-", lim.reasons...)
	}
	p.undoc = lim.undoc
	return p
}

// turn brings window b to a call made at start, in fairgate's window of
// length window seconds: a window that ended since b's last call is full
// again, in both services (ERL's counter is per window too).
func (b *bucket) turn(start, end time.Time, window float64) {
	w := start.Unix() / max(int64(window), 1)
	if !b.seen || w != b.window {
		b.lo, b.hi, b.window = b.burst, b.burst, w
	}
	b.seen = true
	b.lastB, b.lastA = start, end
}

// bucketOnly are the documented differences of token buckets: in the
// fixed pass they explain nothing.
var bucketOnly = map[string]bool{"token-bucket": true, "window-reset": true, "override-raise": true, "refill": true}

// shape is the reason a figure differs from ERL's for being a token
// bucket's: none in the fixed pass.
func (m *model) shape() []string {
	if m.fixed {
		return nil
	}
	return []string{"token-bucket"}
}
