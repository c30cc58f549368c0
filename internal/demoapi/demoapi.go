// Package demoapi is a synthetic multi-tenant API with a real capacity
// limit, the upstream of `fairgate demo` and of the overload benchmarks.
// It lives apart from bench so that the demo does not link the benchmark's
// plotting and reporting code.
package demoapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Config is the capacity model of the demo API.
type Config struct {
	// Connections is the size of the simulated database pool: at most this
	// many requests are served at once, the rest wait. Default 16.
	Connections int
	// ServiceTime maps a path prefix to the mean time a request holds a
	// connection. Paths matching none take DefaultServiceTime. Nil means
	// the demo routes: users/me 5 ms, search 20 ms, reports/export 300 ms.
	ServiceTime map[string]time.Duration
	// DefaultServiceTime is the service time of other paths. Default 5 ms.
	DefaultServiceTime time.Duration
	// Jitter is the spread of service times: each request takes
	// mean × exp(Jitter·Z − Jitter²/2), Z standard normal — a log-normal
	// with the configured mean and a right tail, as real query times have
	// (Jitter 0.3 puts p99 near 1.9× the mean). Default 0.3; negative
	// means none (every request takes exactly the mean). A request may
	// bring its own Z in JitterHeader.
	Jitter float64
	// TokensPerSecond, when set, makes the API a completion service too:
	// a request with the query parameter tokens=N (1 ≤ N ≤ 10⁶) holds a
	// connection while it generates N tokens at this rate, streaming them
	// as server-sent events, and reports N in the trailer UsageTrailer at
	// the end, as LLM APIs report a completion's usage.
	TokensPerSecond float64
}

// UsageTrailer is the trailer in which a completion reports the tokens
// it generated.
const UsageTrailer = "X-Usage-Tokens"

// streamChunk is how often a completion sends the tokens it generated.
const streamChunk = 20 * time.Millisecond

// ServiceTimes are the service times of the demo API's routes.
func ServiceTimes() map[string]time.Duration {
	return map[string]time.Duration{
		"/api/v1/users/me":       5 * time.Millisecond,
		"/api/v1/search":         20 * time.Millisecond,
		"/api/v1/reports/export": 300 * time.Millisecond,
	}
}

// API is a synthetic API with a real capacity limit: requests queue
// for one of a fixed number of connections, then hold it for their service
// time. Overload therefore produces queueing and timeouts, as in
// production.
type API struct {
	cfg     Config
	conns   chan struct{}
	waiting atomic.Int64
	served  atomic.Int64
	busy    atomic.Int64 // ns
	seen    atomic.Int64
}

// New returns an API with cfg's zero fields defaulted.
func New(cfg Config) *API {
	if cfg.Connections <= 0 {
		cfg.Connections = 16
	}
	if cfg.ServiceTime == nil {
		cfg.ServiceTime = ServiceTimes()
	}
	if cfg.DefaultServiceTime <= 0 {
		cfg.DefaultServiceTime = 5 * time.Millisecond
	}
	if cfg.Jitter == 0 {
		cfg.Jitter = 0.3
	}
	return &API{cfg: cfg, conns: make(chan struct{}, cfg.Connections)}
}

// Stats are the API's counters.
type Stats struct {
	// Seen counts requests received, Served those that got a connection
	// and finished; Waiting and InUse are gauges.
	Seen, Served, Waiting, InUse int64
	// Busy is the connection time of the calls served in full: the work
	// that reached a client, not the calls cut short when it left.
	Busy time.Duration
}

// Stats returns the API's counters.
func (u *API) Stats() Stats {
	return Stats{Seen: u.seen.Load(), Served: u.served.Load(), Waiting: u.waiting.Load(), InUse: int64(len(u.conns)), Busy: time.Duration(u.busy.Load())}
}

// ServeHTTP serves one request: wait for a connection, hold it for the
// route's service time, answer with a small JSON document.
//
// The query parameter rows=N scales the service time by N/1000 (1 ≤ N ≤
// 10⁶): an un-paginated export of 10 000 rows holds its connection ten
// times longer than the default page of 1000, for the same route and so
// the same cost in tokens.
func (u *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.seen.Add(1)
	ctx := r.Context()
	start := time.Now()
	u.waiting.Add(1)
	select {
	case u.conns <- struct{}{}:
		u.waiting.Add(-1)
	case <-ctx.Done():
		u.waiting.Add(-1)
		return
	}
	wait := time.Since(start)
	if n, err := strconv.Atoi(r.URL.Query().Get("tokens")); err == nil && n >= 1 && n <= 1e6 && u.cfg.TokensPerSecond > 0 {
		u.complete(w, r, n)
		<-u.conns
		return
	}
	d := u.serviceTime(r.URL.Path, r.URL.Query().Get("rows"), r.Header.Get(JitterHeader))
	ok := sleep(ctx, d)
	<-u.conns
	if !ok {
		return
	}
	u.served.Add(1)
	u.busy.Add(int64(d))
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"tenant":     r.Header.Get("X-Tenant-Id"),
		"tier":       r.Header.Get("X-Tenant-Tier"),
		"path":       r.URL.Path,
		"db_wait_ms": float64(wait.Microseconds()) / 1000,
		"service_ms": float64(d.Microseconds()) / 1000,
	})
}

// complete generates a completion of n tokens on the connection the
// caller holds: server-sent events every streamChunk with the tokens
// generated since, then n in UsageTrailer. A client that leaves stops it;
// only a completion generated in full counts as served.
func (u *API) complete(w http.ResponseWriter, r *http.Request, n int) {
	d := time.Duration(float64(n) / u.cfg.TokensPerSecond * float64(time.Second))
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Trailer", UsageTrailer)
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	start, sent := time.Now(), 0
	for sent < n {
		if !sleep(r.Context(), min(streamChunk, d-time.Since(start))) {
			return
		}
		now := min(n, int(float64(n)*float64(time.Since(start))/float64(d)))
		if time.Since(start) >= d {
			now = n
		}
		if now > sent {
			fmt.Fprintf(w, "data: {\"tokens\":%d}\n\n", now-sent)
			if flusher != nil {
				flusher.Flush()
			}
			sent = now
		}
	}
	io.WriteString(w, "data: [DONE]\n\n")
	w.Header().Set(UsageTrailer, strconv.Itoa(n))
	u.served.Add(1)
	u.busy.Add(int64(d))
}

// JitterHeader carries a request's own standard normal Z for its service
// time's jitter (clamped to ±6), instead of one drawn at random: the
// benchmark's load generator draws it from each tenant's seeded stream,
// so that a tenant's requests take the same service times in every run
// that is compared with another — its p99 under a flood against its p99
// alone then differs by what the flood did, not by which requests drew
// the slow service times (common random numbers).
const JitterHeader = "X-Demo-Jitter"

// serviceTime draws one request's service time; z is JitterHeader's value.
func (u *API) serviceTime(path, rows, z string) time.Duration {
	d := u.MeanServiceTime(path, rows)
	if s := u.cfg.Jitter; s > 0 {
		n, err := strconv.ParseFloat(z, 64)
		if err != nil || math.IsNaN(n) {
			n = rand.NormFloat64()
		}
		n = min(max(n, -6), 6)
		d = time.Duration(float64(d) * math.Exp(s*n-s*s/2))
	}
	return d
}

// Connections is the size of the simulated connection pool.
func (u *API) Connections() int { return u.cfg.Connections }

// MeanServiceTime is the mean service time of path with the rows query
// parameter: the longest matching prefix's, scaled by rows/1000.
func (u *API) MeanServiceTime(path, rows string) time.Duration {
	mean := u.cfg.DefaultServiceTime
	best := 0
	for prefix, d := range u.cfg.ServiceTime {
		if strings.HasPrefix(path, prefix) && len(prefix) > best {
			mean, best = d, len(prefix)
		}
	}
	if n, err := strconv.Atoi(rows); err == nil && n >= 1 && n <= 1e6 {
		mean = mean * time.Duration(n) / 1000
	}
	return mean
}

// sleep waits d or until ctx is done; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
