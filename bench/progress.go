package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progressWidth is the progress bar's width, in characters.
const progressWidth = 30

// progressEvery is how often a run's progress line is redrawn: often enough
// to watch, seldom enough that a terminal, or a log of carriage returns,
// is not flooded.
const progressEvery = 250 * time.Millisecond

// progress is one moment of a run's progress line.
type progress struct {
	desc string
	// elapsed is the time since the run's arrivals began, of arrivals.
	elapsed, arrivals time.Duration
	// sent counts the requests sent so far; open those still awaiting an
	// answer, which is what a run that is draining shows.
	sent, open int64
	// finished is the run's last line, which shows the requests sent and
	// the time elapsed whenever the run ended.
	finished bool
}

// String renders p: the description, with the requests sent (during the
// arrivals, and on the last line) or those still open (while draining);
// the share of the arrival time passed, as a percentage and a bar; and the
// time elapsed, once the arrivals are over.
func (p progress) String() string {
	var b strings.Builder
	if p.elapsed < p.arrivals || p.finished {
		fmt.Fprintf(&b, "%-28s %6d sent", p.desc, p.sent)
	} else {
		fmt.Fprintf(&b, "%-28s %6d open", p.desc+" draining", p.open)
	}
	frac := 1.0
	if p.arrivals > 0 && !p.finished {
		frac = min(float64(p.elapsed)/float64(p.arrivals), 1)
	}
	full := int(frac * progressWidth)
	fmt.Fprintf(&b, " %3d%% |%s%s|", int(frac*100), strings.Repeat("█", full), strings.Repeat(" ", progressWidth-full))
	if frac == 1 {
		fmt.Fprintf(&b, "  [%s]", p.elapsed.Round(time.Second))
	}
	return b.String()
}

// showProgress redraws run's progress line on w (a terminal: each line
// overwrites the one before) every progressEvery until the returned func
// is called, which draws the last line and ends it. A nil w shows nothing.
func showProgress(w io.Writer, desc string, arrivals time.Duration, l *load) (stop func()) {
	if w == nil {
		return func() {}
	}
	start := time.Now()
	at := func(finished bool) progress {
		return progress{desc: desc, elapsed: time.Since(start), arrivals: arrivals,
			sent: l.sent.Load(), open: l.inFlight.Load(), finished: finished}
	}
	last := 0 // the width of the line drawn before, which a shorter one must blank
	draw := func(p progress) {
		line := p.String()
		n := len([]rune(line))
		fmt.Fprintf(w, "\r%s%s", line, strings.Repeat(" ", max(last-n, 0)))
		last = n
	}
	done, drawn := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(drawn)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				draw(at(false))
			}
		}
	}()
	return func() {
		close(done)
		<-drawn // the goroutine has stopped drawing: last is this func's now
		draw(at(true))
		fmt.Fprintln(w)
	}
}
