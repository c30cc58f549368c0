package bench

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// h2Streams is how many streams h2load keeps open on each connection.
const h2Streams = 8

// measureH2load is measure with h2load (nghttp2's) as the generator, for
// HTTP/2 (ThroughputOptions.H2load): conns connections, h2Streams streams
// each, for d, sending key. rejecting says the key is over its quota (a
// -429 mode). As with wrk, each mode's server is alone on the first core,
// h2load (one thread) and the upstream on the second; h2c with prior
// knowledge, or over TLS (ThroughputOptions.TLS) with ALPN. h2load sends
// one key (fixed headers), reports no percentiles, and tells status
// classes apart, so a row's latency columns are empty.
func measureH2load(ctx context.Context, srv, up *child, conns int, d time.Duration, key string, rejecting bool) (ThroughputRow, error) {
	var row ThroughputRow
	cmd := exec.CommandContext(ctx, "taskset", "-c", loadCPU, "h2load", "-t1", "-c"+strconv.Itoa(conns),
		"-m"+strconv.Itoa(h2Streams), "-D"+strconv.Itoa(max(1, int(d.Seconds()))),
		"-H", "Authorization: Bearer "+key, srv.url+"/api/v1/users/me")
	cpu0, up0 := srv.cpu(), up.cpu()
	start := time.Now()
	out, err := cmd.Output()
	wall := time.Since(start)
	if err != nil {
		return row, fmt.Errorf("bench: h2load: %w\n%s", err, out)
	}
	h, err := parseH2load(string(out))
	if err != nil {
		return row, err
	}
	secs := h.wall.Seconds()
	row.OK = float64(h.status2xx) / secs
	if rejecting {
		row.Rejected = float64(h.status4xx) / secs
		row.Errors = h.failed + h.status5xx
	} else {
		row.Errors = h.failed + h.status4xx + h.status5xx
	}
	row.setCPU(srv, up, cpu0, up0, wall, h.status2xx+h.status4xx+h.status5xx, cmd.ProcessState)
	return row, nil
}

// h2loadResult is what h2load printed.
type h2loadResult struct {
	wall                            time.Duration
	failed                          int
	status2xx, status4xx, status5xx int
}

// parseH2load reads h2load's report: "finished in 5.00s, …", "requests:
// N total, … E errored, T timeout" and "status codes: A 2xx, B 3xx, C
// 4xx, D 5xx".
func parseH2load(out string) (h2loadResult, error) {
	var r h2loadResult
	var sawFinished, sawStatus bool
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(strings.NewReplacer(",", " ").Replace(line))
		switch {
		case len(f) >= 3 && f[0] == "finished" && f[1] == "in":
			d, err := time.ParseDuration(f[2])
			if err != nil {
				return r, fmt.Errorf("bench: h2load's duration %q: %w", f[2], err)
			}
			r.wall, sawFinished = d, true
		case len(f) >= 2 && f[0] == "requests:":
			for i := 1; i+1 < len(f); i++ {
				// "failed" counts 4xx and 5xx answers too: the errors are
				// the streams that broke ("errored", timeouts included).
				if f[i+1] == "errored" {
					n, _ := strconv.Atoi(f[i])
					r.failed += n
				}
			}
		case len(f) >= 10 && f[0] == "status" && f[1] == "codes:":
			for i := 2; i+1 < len(f); i += 2 {
				n, err := strconv.Atoi(f[i])
				if err != nil {
					return r, fmt.Errorf("bench: h2load's status codes %q: %w", line, err)
				}
				switch f[i+1] {
				case "2xx":
					r.status2xx = n
				case "4xx":
					r.status4xx = n
				case "5xx":
					r.status5xx = n
				}
			}
			sawStatus = true
		}
	}
	if !sawFinished || !sawStatus || r.wall <= 0 {
		return r, fmt.Errorf("bench: no result in h2load's report:\n%s", out)
	}
	return r, nil
}
