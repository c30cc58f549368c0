package gateway

import (
	"errors"
	"math"
	"runtime/debug"
	"strconv"
	"strings"
)

// DefaultGCPercent is the collector's target when neither the config
// (server.gc_percent) nor GOGC sets one. A gateway's live heap is small
// (config, buckets, pools) and what it allocates per request dies with the
// request, so a higher target than Go's 100 trades a little memory for
// fewer collections (bench/PERF.md has the collector's share of the CPU on
// a flood of 429s at both targets).
const DefaultGCPercent = 400

// minMemoryLimit is the smallest server.memory_limit: below it the
// collector would run almost without pause.
const minMemoryLimit = 16 << 20

// validateGC checks gc_percent and memory_limit.
func (s ServerConfig) validateGC() []error {
	var errs []error
	switch {
	case s.GCPercent == -1 && s.MemoryLimit == 0:
		errs = append(errs, errors.New("server.gc_percent: -1 (collector off) needs server.memory_limit, or the heap grows without bound"))
	case s.GCPercent < -1 || s.GCPercent > 10000:
		errs = append(errs, errors.New("server.gc_percent: must be -1 (off, with memory_limit), 0 (the default) or 1 to 10000"))
	}
	if s.MemoryLimit != 0 && s.MemoryLimit < minMemoryLimit {
		errs = append(errs, errors.New("server.memory_limit: must be 0 (none) or at least 16777216 bytes (16 MiB)"))
	}
	return errs
}

// GCSettings are the garbage collector's settings ApplyGC chose.
type GCSettings struct {
	// GCPercent is the collector's target (-1: off).
	GCPercent int
	// MemoryLimit is the soft memory limit in bytes; math.MaxInt64 is
	// none.
	MemoryLimit int64
}

// GC returns the collector settings s asks for: its own fields; for a zero
// field, the GOGC or GOMEMLIMIT environment variable (read with getenv)
// when it is set and valid, as the runtime reads it; else the defaults
// (DefaultGCPercent, no limit).
func (s ServerConfig) GC(getenv func(string) string) GCSettings {
	g := GCSettings{GCPercent: s.GCPercent, MemoryLimit: s.MemoryLimit}
	if g.GCPercent == 0 {
		g.GCPercent = DefaultGCPercent
		if v, ok := parseGOGC(getenv("GOGC")); ok {
			g.GCPercent = v
		}
	}
	if g.MemoryLimit == 0 {
		g.MemoryLimit = math.MaxInt64
		if v, ok := parseGOMEMLIMIT(getenv("GOMEMLIMIT")); ok {
			g.MemoryLimit = v
		}
	}
	return g
}

// parseGOGC reads GOGC as the runtime does: "off" or a whole number.
func parseGOGC(v string) (int, bool) {
	if v == "off" {
		return -1, true
	}
	n, err := strconv.Atoi(v)
	return n, err == nil && n >= 0
}

// parseGOMEMLIMIT reads GOMEMLIMIT as the runtime does: "off", or a
// whole number of bytes with an optional unit B, KiB, MiB, GiB or TiB.
func parseGOMEMLIMIT(v string) (int64, bool) {
	if v == "off" {
		return math.MaxInt64, true
	}
	shift := 0
	for _, u := range []struct {
		suffix string
		shift  int
	}{{"KiB", 10}, {"MiB", 20}, {"GiB", 30}, {"TiB", 40}, {"B", 0}} {
		if s, ok := strings.CutSuffix(v, u.suffix); ok {
			v, shift = s, u.shift
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64>>shift {
		return 0, false
	}
	return n << shift, true
}

// ApplyGC sets the Go runtime's collector target and memory limit to what
// s asks for (see ServerConfig.GC) and returns them. The settings are the
// process's: main calls it at start and after each reload; a program
// that embeds the gateway decides for itself.
func ApplyGC(s ServerConfig, getenv func(string) string) GCSettings {
	g := s.GC(getenv)
	debug.SetGCPercent(g.GCPercent)
	debug.SetMemoryLimit(g.MemoryLimit)
	return g
}
