package bench

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Machine is what a run knew of the machine it shared: a figure measured on
// a loaded box is recognisable by it.
type Machine struct {
	// Cores is runtime.NumCPU; GOMAXPROCS the bench process's setting.
	Cores      int `json:"cores"`
	GOMAXPROCS int `json:"gomaxprocs"`
	// LoadStart and LoadEnd are the 1, 5 and 15 minute load averages
	// (/proc/loadavg) when the scenario started and ended. Nil where the
	// system has no /proc/loadavg.
	LoadStart []float64 `json:"load_average_start,omitempty"`
	LoadEnd   []float64 `json:"load_average_end,omitempty"`
	// GCPercent is the Go collector's target the process ran at (-1: off;
	// 0: not recorded). The gateway under test shares the process, so the
	// bench sets it as fairgate serve would (see Options.GCPercent).
	GCPercent int `json:"gc_percent,omitempty"`
}

// machineNow returns the machine's cores and its load average now, in
// LoadStart, with the collector target gcPercent.
func machineNow(gcPercent int) Machine {
	return Machine{Cores: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), LoadStart: loadAverage(), GCPercent: gcPercent}
}

// loadAverage reads /proc/loadavg, or returns nil.
func loadAverage() []float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return nil
	}
	la, err := parseLoadAvg(string(b))
	if err != nil {
		return nil
	}
	return la
}

// parseLoadAvg parses the first three fields of /proc/loadavg
// ("0.91 0.70 0.79 7/114 6393").
func parseLoadAvg(s string) ([]float64, error) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return nil, fmt.Errorf("bench: load average %q: want 3 fields", s)
	}
	out := make([]float64, 3)
	for i := range out {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return nil, fmt.Errorf("bench: load average %q: %w", s, err)
		}
		out[i] = v
	}
	return out, nil
}

// busy reports whether the 1-minute load at the start was at least half
// the cores: something else (or an earlier scenario) was running.
func (m Machine) busy() bool { return len(m.LoadStart) > 0 && m.LoadStart[0] >= float64(m.Cores)/2 }

// String is the report's line, e.g. "2 cores, GOMAXPROCS 2, GOGC 400;
// load average (1, 5, 15 min) 0.91 0.70 0.79 at the start, 1.52 1.01 0.88
// at the end".
func (m Machine) String() string {
	s := fmt.Sprintf("%d cores, GOMAXPROCS %d", m.Cores, m.GOMAXPROCS)
	switch {
	case m.GCPercent > 0:
		s += fmt.Sprintf(", GOGC %d", m.GCPercent)
	case m.GCPercent < 0:
		s += ", GOGC off"
	}
	s += fmt.Sprintf("; load average (1, 5, 15 min) %s at the start, %s at the end", loadString(m.LoadStart), loadString(m.LoadEnd))
	if m.busy() {
		s += fmt.Sprintf(". The machine was busy when the run started (1-minute load %.2f for %d cores): latencies may be pessimistic", m.LoadStart[0], m.Cores)
	}
	return s
}

func loadString(la []float64) string {
	if len(la) < 3 {
		return "unknown"
	}
	return fmt.Sprintf("%.2f %.2f %.2f", la[0], la[1], la[2])
}
