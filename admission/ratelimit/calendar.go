package ratelimit

import (
	"fmt"
	"math"
	"time"
)

// Unit is a calendar unit a fixed window can last.
type Unit uint8

// The units. A week starts on Monday; a month on its first day.
const (
	Second Unit = iota + 1
	Minute
	Hour
	Day
	Week
	Month
	Year
)

var unitNames = [...]string{Second: "second", Minute: "minute", Hour: "hour", Day: "day", Week: "week", Month: "month", Year: "year"}

// ParseUnit returns the unit named s ("day"), false when s names none.
func ParseUnit(s string) (Unit, bool) {
	for u, n := range unitNames {
		if n != "" && n == s {
			return Unit(u), true
		}
	}
	return 0, false
}

func (u Unit) String() string {
	if int(u) < len(unitNames) && unitNames[u] != "" {
		return unitNames[u]
	}
	return fmt.Sprintf("Unit(%d)", uint8(u))
}

// nominal is u's usual length: what a token bucket of the same quota
// would refill over (a month 30 days, a year 365, as envoyproxy/ratelimit
// counts them).
func (u Unit) nominal() time.Duration {
	switch u {
	case Second:
		return time.Second
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	case Day:
		return 24 * time.Hour
	case Week:
		return 7 * 24 * time.Hour
	case Month:
		return 30 * 24 * time.Hour
	case Year:
		return 365 * 24 * time.Hour
	}
	return 0
}

// Calendar is the period of a fixed window: how the timeline is cut into
// windows, each of which starts with the whole quota. Either every d
// since the Unix epoch (Every: a window of a minute starts at each whole
// minute of UTC, of a day at 00:00 UTC, as envoyproxy/ratelimit cuts
// them), or a calendar unit in a time zone (In: a day starts at that
// zone's midnight and lasts 23, 24 or 25 hours, a month on its first day,
// gubernator's DURATION_IS_GREGORIAN). The zero Calendar is no window.
type Calendar struct {
	every time.Duration
	unit  Unit
	loc   *time.Location
}

// Every returns the calendar of windows of d (> 0) aligned to multiples
// of d since the Unix epoch.
func Every(d time.Duration) Calendar { return Calendar{every: d} }

// In returns the calendar of unit u in loc (nil: UTC).
func In(u Unit, loc *time.Location) Calendar {
	if loc == nil {
		loc = time.UTC
	}
	return Calendar{unit: u, loc: loc}
}

// IsZero reports whether c is the zero Calendar: no window, a token
// bucket.
func (c Calendar) IsZero() bool { return c.every <= 0 && c.unit == 0 }

// Nominal returns the usual length of c's windows: Every's d, or the
// unit's (a day 24 hours, a month 30 days).
func (c Calendar) Nominal() time.Duration {
	if c.every > 0 {
		return c.every
	}
	return c.unit.nominal()
}

// Bounds returns the window of c that holds t: start ≤ t < end.
func (c Calendar) Bounds(t time.Time) (start, end time.Time) {
	if c.every > 0 {
		ns := t.UnixNano()
		s := ns - mod(ns, int64(c.every))
		return time.Unix(0, s), time.Unix(0, s+int64(c.every))
	}
	lt := t.In(c.loc)
	y, mo, d := lt.Date()
	switch c.unit {
	case Second, Minute, Hour:
		// Whole units of the zone's clock at t: its offset shifts them
		// (an hour starts at :30 in a zone of UTC+5:30).
		_, off := lt.Zone()
		u := int64(c.unit.nominal())
		ns := t.UnixNano() + int64(off)*1e9
		s := t.UnixNano() - mod(ns, u)
		return time.Unix(0, s), time.Unix(0, s+u)
	case Day:
		start, end = midnight(y, mo, d, c.loc), midnight(y, mo, d+1, c.loc)
	case Week:
		back := (int(lt.Weekday()) + 6) % 7 // days since Monday
		start, end = midnight(y, mo, d-back, c.loc), midnight(y, mo, d-back+7, c.loc)
	case Month:
		start, end = midnight(y, mo, 1, c.loc), midnight(y, mo+1, 1, c.loc)
	case Year:
		start, end = midnight(y, 1, 1, c.loc), midnight(y+1, 1, 1, c.loc)
	default:
		return t, t.Add(time.Nanosecond)
	}
	if start.After(t) || !end.After(t) { // a zone stranger than midnight covers
		return Every(c.unit.nominal()).Bounds(t)
	}
	return start, end
}

// Limit returns the fixed-window Limit of burst tokens for c's window that
// holds now: End is that window's end. Rate is the nominal rate (burst
// over the nominal length), which only Limit.Window reads.
func (c Calendar) Limit(burst float64, now time.Time) Limit {
	_, end := c.Bounds(now)
	return Limit{Rate: burst / c.Nominal().Seconds(), Burst: burst, End: end.UnixNano()}
}

// midnight returns the first instant of day d of month m of year y (out
// of range values normalized, as time.Date does) in loc. Where the zone's
// clock skips midnight (a DST change at 00:00, as in São Paulo until
// 2019), time.Date may give an instant of the day before: the day starts
// at the change. Where it shows midnight twice (clocks back from 01:00 to
// 00:00, as in Amman until 2021), time.Date may give the second: the day
// starts at the first.
func midnight(y int, m time.Month, d int, loc *time.Location) time.Time {
	y, m, d = time.Date(y, m, d, 12, 0, 0, 0, time.UTC).Date()
	t := time.Date(y, m, d, 0, 0, 0, 0, loc)
	if ty, tm, td := t.Date(); ty != y || tm != m || td != d {
		if _, end := t.ZoneBounds(); !end.IsZero() {
			return end
		}
		return t
	}
	if start, _ := t.ZoneBounds(); !start.IsZero() && t.Sub(start) < 24*time.Hour {
		_, now := t.Zone()
		if _, before := start.Add(-time.Nanosecond).Zone(); before > now {
			// The same clock reading under the earlier offset.
			e := t.Add(-time.Duration(before-now) * time.Second)
			if ey, em, ed := e.Date(); e.Before(start) && ey == y && em == m && ed == d && e.Hour() == 0 && e.Minute() == 0 {
				return e
			}
		}
	}
	return t
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// A fixed window is kept in a bucket's two fields: tokens is the units
// taken in the window, last the window's end (Unix ns, wall clock).

// usedIn returns the units window state b has taken in l's window: none
// when b is of an earlier window. A take whose window has already given
// way to a later one (decided late, at a window's end) counts in the later
// one.
func (b bucket) usedIn(l Limit) float64 {
	if b.last >= l.End {
		return b.tokens
	}
	return 0
}

// leftIn returns the tokens window state b has left under l.
func (b bucket) leftIn(l Limit) float64 { return math.Max(l.Burst-b.usedIn(l), 0) }

// takeFixed takes cost tokens from window state b under l at wall (Unix
// ns) when the window has them; a refusal changes nothing. The tokens come
// back all at once, when the window ends: RetryAfter and ResetAfter are
// both the time until then.
func (b bucket) takeFixed(l Limit, wall int64, cost float64) (bucket, Result) {
	left := b.leftIn(l)
	if left < cost {
		return b, fixedDenial(b, l, wall, left, cost)
	}
	end := max(b.last, l.End)
	return bucket{tokens: b.usedIn(l) + cost, last: end}, Result{
		Allowed:    true,
		Remaining:  left - cost,
		ResetAfter: time.Duration(max(end-wall, 0)),
	}
}

// fixedDenial is denial for a window state b holding left tokens.
func fixedDenial(b bucket, l Limit, wall int64, left, cost float64) Result {
	reset := time.Duration(max(max(b.last, l.End)-wall, 0))
	r := Result{Remaining: left, ResetAfter: reset}
	if left < cost {
		r.RetryAfter = reset
	}
	return r
}
