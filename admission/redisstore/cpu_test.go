package redisstore

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// cpuTicks returns the machine's busy CPU time and that of the given
// processes (0 is this one), in clock ticks (USER_HZ, 100 a second), from
// /proc; ok is false where /proc is not Linux's.
func cpuTicks(pids ...int) (machine, procs int64, ok bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, 0, false
	}
	for i, v := range f[1:8] { // user nice system idle iowait irq softirq
		n, _ := strconv.ParseInt(v, 10, 64)
		if i != 3 && i != 4 {
			machine += n
		}
	}
	for _, pid := range pids {
		path := "/proc/self/stat"
		if pid != 0 {
			path = "/proc/" + strconv.Itoa(pid) + "/stat"
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, 0, false
		}
		_, rest, _ := strings.Cut(string(b), ") ") // the command may hold spaces
		f := strings.Fields(rest)
		for _, i := range []int{11, 12} { // utime, stime (fields 14, 15)
			n, _ := strconv.ParseInt(f[i], 10, 64)
			procs += n
		}
	}
	return machine, procs, true
}

// othersBusy runs f and reports whether processes other than this test
// and the given ones used more than a quarter of one CPU meanwhile: a
// timing judgement made then would measure them, not the code (as when
// go test runs several packages at once on two cores).
func othersBusy(t *testing.T, f func(), pids ...int) bool {
	t.Helper()
	pids = append([]int{0}, pids...)
	m0, p0, ok0 := cpuTicks(pids...)
	start := time.Now()
	f()
	elapsed := time.Since(start)
	m1, p1, ok1 := cpuTicks(pids...)
	if !ok0 || !ok1 {
		return false
	}
	const ticksPerSecond = 100 // USER_HZ
	others := float64((m1 - m0) - (p1 - p0))
	t.Logf("CPU over %v: %d ticks busy, %.0f of them other processes'", elapsed.Round(time.Millisecond), m1-m0, others)
	return others > 0.25*ticksPerSecond*elapsed.Seconds()
}
