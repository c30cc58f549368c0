package shed

import "fmt"

// Criticality says how much a route's requests matter when the upstream is
// overloaded, after Google's criticality classes. The zero value is Default.
type Criticality uint8

const (
	// Default is ordinary traffic.
	Default Criticality = iota
	// Critical is traffic users wait on (a page load, a login); it is shed
	// last.
	Critical
	// Sheddable is traffic that can be retried later at no real cost
	// (exports, bulk syncs, prefetches); it is shed first.
	Sheddable
)

// String returns the config word for c.
func (c Criticality) String() string {
	switch c {
	case Critical:
		return "critical"
	case Sheddable:
		return "sheddable"
	default:
		return "default"
	}
}

// MarshalText returns the config word for c.
func (c Criticality) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText parses "critical", "default" or "sheddable" and rejects
// anything else, so a typo fails at load time rather than at run time. Its
// error carries no "shed:" prefix: the decoder that calls it puts the
// field's path in the file before it, and the package is no business of
// the person reading the config.
func (c *Criticality) UnmarshalText(b []byte) error {
	switch string(b) {
	case "critical":
		*c = Critical
	case "default", "":
		*c = Default
	case "sheddable":
		*c = Sheddable
	default:
		return fmt.Errorf("unknown criticality %q (want critical, default or sheddable)", b)
	}
	return nil
}
