package tenant

import (
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// Period is a limit's per: a duration ("24h") or a calendar unit ("day").
// As a token bucket's, a unit is its nominal length (a day 24 hours, a
// month 30 days, a year 365); as a fixed window's (window: fixed), the
// calendar's (a day from midnight in the limit's time_zone).
type Period struct {
	D    time.Duration
	Unit ratelimit.Unit
	// word is what the file said when it was neither, for the message.
	word string
}

// Per returns the Period of d.
func Per(d time.Duration) Period { return Period{D: d} }

// UnmarshalYAML reads a duration or a unit's name; anything else is kept
// for validation to refuse by its field's path.
func (p *Period) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		if u, ok := ratelimit.ParseUnit(strings.ToLower(n.Value)); ok {
			*p = Period{Unit: u}
			return nil
		}
	}
	var d time.Duration
	if err := n.Decode(&d); err != nil {
		*p = Period{word: n.Value}
		return nil
	}
	*p = Period{D: d}
	return nil
}

// IsZero reports whether p is absent.
func (p Period) IsZero() bool { return p.D == 0 && p.Unit == 0 && p.word == "" }

// Length returns p's length: the duration, or the unit's nominal one.
func (p Period) Length() time.Duration {
	if p.Unit != 0 {
		return ratelimit.In(p.Unit, nil).Nominal()
	}
	return p.D
}

func (p Period) String() string {
	if p.Unit != 0 {
		return p.Unit.String()
	}
	return p.D.String()
}

// The windows a limit may count in: a token bucket (the default) or fixed
// windows.
const (
	WindowBucket = "bucket"
	WindowFixed  = "fixed"
)

// Window is a limit's fixed window, resolved: the zero Window is a token
// bucket.
type Window struct {
	// Unit is the calendar unit of the window in TimeZone (UTC when
	// empty), or zero for windows of Every since the Unix epoch.
	Unit     ratelimit.Unit
	Every    time.Duration
	TimeZone string
}

// IsZero reports whether w is no window: a token bucket.
func (w Window) IsZero() bool { return w.Unit == 0 && w.Every == 0 }

// Calendar returns w's calendar, its time zone loaded (validation loaded
// it once already, so only a zone database changed since fails).
func (w Window) Calendar() (ratelimit.Calendar, error) {
	if w.Unit == 0 {
		return ratelimit.Every(w.Every), nil
	}
	loc, err := time.LoadLocation(cmpOr(w.TimeZone, "UTC"))
	if err != nil {
		return ratelimit.Calendar{}, err
	}
	return ratelimit.In(w.Unit, loc), nil
}

// Key names w's cut of the timeline ("day/Europe/Berlin", "1h0m0s"): a
// limit's windows are counted under it, so a reload that cuts them
// otherwise (a month made a day, another zone) starts a fresh count rather
// than carrying the old window's into shorter ones until it ends.
func (w Window) Key() string {
	if w.Unit == 0 {
		return w.Every.String()
	}
	return w.Unit.String() + "/" + cmpOr(w.TimeZone, "UTC")
}

// String describes w ("a day from midnight in Europe/Berlin").
func (w Window) String() string {
	switch {
	case w.IsZero():
		return "a token bucket"
	case w.Unit == 0:
		return fmt.Sprintf("fixed windows of %v from the Unix epoch", w.Every)
	}
	return fmt.Sprintf("fixed windows of a calendar %v in %s", w.Unit, cmpOr(w.TimeZone, "UTC"))
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// validateWindow checks l's window, per and time_zone, each error naming
// its field under f.
func validateWindow(f string, l LimitConfig) []error {
	var errs []error
	switch l.Window {
	case "", WindowBucket:
		if l.TimeZone != "" {
			errs = append(errs, fmt.Errorf("%s.time_zone: applies to fixed windows only: add window: fixed, or delete it", f))
		}
		return errs
	case WindowFixed:
	default:
		return append(errs, fmt.Errorf("%s.window: must be bucket or fixed, got %q", f, clip(l.Window)))
	}
	switch {
	case l.Rate != 0 || l.Per.IsZero():
		errs = append(errs, fmt.Errorf("%s: a fixed window counts burst requests per window: set per (a unit such as day, or a duration), not rate", f))
	case l.Mode == ModeSync:
		errs = append(errs, fmt.Errorf("%s.mode: a fixed window is always decided exactly on a shared store: delete mode: sync", f))
	case l.TimeZone != "" && l.Per.Unit == 0:
		errs = append(errs, fmt.Errorf("%s.time_zone: applies to a calendar unit (per: day); windows of a duration (%v) are counted from the Unix epoch", f, l.Per.D))
	case l.TimeZone != "":
		if _, err := time.LoadLocation(l.TimeZone); err != nil || strings.EqualFold(l.TimeZone, "local") {
			errs = append(errs, fmt.Errorf("%s.time_zone: %q is not an IANA time zone (like Europe/Berlin or UTC)", f, clip(l.TimeZone)))
		}
	}
	return errs
}
