package bench

import (
	"strings"
	"testing"
	"time"
)

// The progress line shows what the progress bar did: requests sent while
// the arrivals run, requests open while draining, the share of the arrival
// time passed, and the time elapsed once the arrivals are over; the last
// line, the requests sent and the time the run took.
func TestProgressLine(t *testing.T) {
	bar := func(full int) string {
		return "|" + strings.Repeat("█", full) + strings.Repeat(" ", progressWidth-full) + "|"
	}
	for _, c := range []struct {
		name string
		p    progress
		want string
	}{
		{"start", progress{desc: "nat/none", arrivals: 10 * time.Second},
			"nat/none                          0 sent   0% " + bar(0)},
		{"arrivals", progress{desc: "nat/none", elapsed: 2500 * time.Millisecond, arrivals: 10 * time.Second, sent: 1234, open: 7},
			"nat/none                       1234 sent  25% " + bar(7)},
		{"draining", progress{desc: "nat/none", elapsed: 11400 * time.Millisecond, arrivals: 10 * time.Second, sent: 5000, open: 42},
			"nat/none draining                42 open 100% " + bar(30) + "  [11s]"},
		{"finished", progress{desc: "nat/none", elapsed: 12600 * time.Millisecond, arrivals: 10 * time.Second, sent: 5000, finished: true},
			"nat/none                       5000 sent 100% " + bar(30) + "  [13s]"},
		{"finished early", progress{desc: "nat/none", elapsed: 3 * time.Second, arrivals: 10 * time.Second, sent: 9, finished: true},
			"nat/none                          9 sent 100% " + bar(30) + "  [3s]"},
	} {
		if got := c.p.String(); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

// showProgress draws nothing without a writer, and with one ends on the
// finished line and a newline.
func TestShowProgress(t *testing.T) {
	l := &load{}
	showProgress(nil, "x", time.Second, l)()
	var b strings.Builder
	l.sent.Store(3)
	showProgress(&b, "x", time.Hour, l)()
	if got := b.String(); !strings.HasPrefix(got, "\rx                                 3 sent 100%") || !strings.HasSuffix(got, "  [0s]\n") {
		t.Errorf("showProgress wrote %q, want the finished line and a newline", got)
	}
}
