package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The cores of a wrk run: the server alone on serverCPU; wrk and, in the
// proxied modes, the upstream on loadCPU.
const (
	serverCPU = "0"
	loadCPU   = "1"
)

// pin moves every thread of process pid to cpu (taskset, util-linux).
func pin(ctx context.Context, pid int, cpu string) error {
	out, err := exec.CommandContext(ctx, "taskset", "-a", "-p", "-c", cpu, strconv.Itoa(pid)).CombinedOutput()
	if err != nil {
		return fmt.Errorf("bench: taskset %s: %v: %s", cpu, err, out)
	}
	return nil
}

// wrkScript is a wrk script that sends GET /api/v1/users/me with the keys
// in turn, each request made once in init (a request built per call
// would cost wrk more than some servers spend answering it).
func wrkScript(keys []string) string {
	var b strings.Builder
	b.WriteString("local reqs = {}\nlocal n = 0\ninit = function(args)\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "  table.insert(reqs, wrk.format(\"GET\", \"/api/v1/users/me\", {[\"Authorization\"] = %q}))\n", "Bearer "+k)
	}
	b.WriteString("end\nrequest = function()\n  n = n + 1\n  return reqs[(n % #reqs) + 1]\nend\n")
	return b.String()
}

// measureWrk is measure with wrk as the generator
// (ThroughputOptions.Wrk): conns connections of one wrk thread, on
// loadCPU, for d, sending keys in turn. rejecting says the keys are over
// their quota (a -429 mode).
//
// The bench's own client costs more CPU per request than any server it
// measures (bench/PERF.md §11), so on a two-core machine it cannot keep a
// server busy, and a server's req/s then says more about the client than
// about the server. wrk costs far less a request: with it on the second
// core and the server alone on the first, a server that answers without
// an upstream (the -429 modes) is the bottleneck, and its req/s is its
// own. (In the proxied modes the upstream shares wrk's core and is the
// bottleneck; their CPU per answer stays the figure to compare.)
func measureWrk(ctx context.Context, srv, up *child, conns int, d time.Duration, keys []string, rejecting bool) (ThroughputRow, error) {
	var row ThroughputRow
	dir, err := os.MkdirTemp("", "fairgate-bench-wrk")
	if err != nil {
		return row, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "keys.lua")
	if err := os.WriteFile(script, []byte(wrkScript(keys)), 0o600); err != nil {
		return row, err
	}
	cmd := exec.CommandContext(ctx, "taskset", "-c", loadCPU, "wrk", "-t1", "-c"+strconv.Itoa(conns),
		"-d"+strconv.Itoa(max(1, int(d.Seconds())))+"s", "--latency", "-s", script, srv.url+"/api/v1/users/me")
	cpu0, up0 := srv.cpu(), up.cpu()
	start := time.Now()
	out, err := cmd.Output()
	wall := time.Since(start)
	if err != nil {
		return row, fmt.Errorf("bench: wrk: %w", err)
	}
	w, err := parseWrk(string(out))
	if err != nil {
		return row, err
	}
	// wrk tells 2xx from the rest only: the rest are the 429s of a
	// rejecting mode, and errors in a proxied one.
	row.OK = float64(w.requests-w.non2xx) / w.wall.Seconds()
	if rejecting {
		row.Rejected = float64(w.non2xx) / w.wall.Seconds()
	} else {
		row.Errors = w.non2xx
	}
	row.Errors += w.socketErrors
	row.P50, row.P99 = w.p50, w.p99
	row.setCPU(srv, up, cpu0, up0, wall, w.requests, cmd.ProcessState)
	return row, nil
}

// setCPU sets row's CPU figures for n answers in wall: srv's and up's CPU
// since cpu0 and up0, and the generator's (ps, when it has ended).
func (row *ThroughputRow) setCPU(srv, up *child, cpu0, up0, wall time.Duration, n int, ps *os.ProcessState) {
	serverCPU := srv.cpu() - cpu0
	row.ServerBusy = serverCPU.Seconds() / wall.Seconds()
	if n <= 0 {
		return
	}
	row.ServerCPU = float64(serverCPU.Microseconds()) / float64(n)
	if srv != up {
		row.UpstreamCPU = float64((up.cpu() - up0).Microseconds()) / float64(n)
	}
	if ps != nil {
		row.LoadCPU = float64((ps.UserTime() + ps.SystemTime()).Microseconds()) / float64(n)
	}
}

// wrkResult is what wrk printed.
type wrkResult struct {
	requests, non2xx, socketErrors int
	wall                           time.Duration
	p50, p99                       float64 // ms
}

// parseWrk reads wrk's report (with --latency).
func parseWrk(out string) (wrkResult, error) {
	var r wrkResult
	seen := false
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 4 && f[1] == "requests" && f[2] == "in":
			// "596375 requests in 5.00s, 319.09MB read"
			r.requests, _ = strconv.Atoi(f[0])
			d, err := time.ParseDuration(strings.TrimSuffix(f[3], ","))
			if err != nil {
				return r, fmt.Errorf("bench: wrk's duration %q: %w", f[3], err)
			}
			r.wall, seen = d, true
		case len(f) == 5 && f[0] == "Non-2xx":
			r.non2xx, _ = strconv.Atoi(f[4])
		case len(f) >= 2 && f[0] == "Socket" && f[1] == "errors:":
			// "Socket errors: connect 0, read 0, write 0, timeout 0"
			for i := 3; i < len(f); i += 2 {
				n, _ := strconv.Atoi(strings.TrimSuffix(f[i], ","))
				r.socketErrors += n
			}
		case len(f) == 2 && (f[0] == "50%" || f[0] == "99%"):
			ms, err := wrkMillis(f[1])
			if err != nil {
				return r, err
			}
			if f[0] == "50%" {
				r.p50 = ms
			} else {
				r.p99 = ms
			}
		}
	}
	if !seen || r.wall <= 0 {
		return r, fmt.Errorf("bench: no request count in wrk's report:\n%s", out)
	}
	return r, nil
}

// wrkMillis reads one of wrk's latencies ("812.00us", "1.50ms", "2.01s")
// in ms.
func wrkMillis(s string) (float64, error) {
	for _, u := range []struct {
		suffix string
		ms     float64
	}{{"us", 1e-3}, {"ms", 1}, {"s", 1e3}, {"m", 60e3}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return 0, fmt.Errorf("bench: wrk latency %q: %w", s, err)
			}
			return f * u.ms, nil
		}
	}
	return 0, fmt.Errorf("bench: wrk latency %q: no unit", s)
}
