package bench

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fairgate/fairgate/internal/demoapi"
	"github.com/fairgate/fairgate/shed"
)

// Outcome is what became of one arrival.
type Outcome uint8

const (
	OK          Outcome = iota // 2xx
	Rejected429                // 429: the tenant sent too much
	Rejected503                // 503: the service is overloaded
	Failed                     // any other status, or a transport error
	TimedOut                   // the client's timeout passed first
	Deferred                   // not sent: the user was honouring Retry-After
)

// sample is one arrival's record.
type sample struct {
	tenant  int              // index in the scenario's Tenants
	crit    shed.Criticality // the call's
	at      time.Duration    // arrival, from the start of the run
	latency time.Duration    // until the whole response was read; 0 if deferred
	outcome Outcome
	layer   string // the rejecting layer named by a 429/503 body
	reason  string // and its reason ("tenant_quota", "global_backstop", …)
	tokens  int    // a completion's tokens asked (Call.Tokens); 0 for other calls
}

// maxInFlight bounds the requests one run keeps open. An arrival beyond it
// is recorded as Failed (layer "generator") rather than sent: the
// generator must not become the bottleneck it is measuring, nor run out of
// file descriptors.
const maxInFlight = 4000

// addrFor returns the k-th simulated client address: 127.0.1.1,
// 127.0.1.2, …, 127.0.1.250, 127.0.2.1, … Linux routes all of 127/8 to the
// loopback interface, so a socket bound to one of these reaches servers on
// 127.0.0.1 and the server sees it as the client's address — what a per-IP
// limiter reads, with no header to trust.
func addrFor(k int) net.IP { return net.IPv4(127, byte(1+k/250), byte(1+k%250), 1).To4() }

// load drives one run: the tenants' open-loop arrivals against base.
type load struct {
	base    string
	tenants []TenantLoad
	dur     time.Duration
	drain   time.Duration
	clients [][]*http.Client // per tenant, per source address
	// holds[t][u] is the unix-nano time until which user u of tenant t
	// honours a Retry-After.
	holds    [][]atomic.Int64
	inFlight atomic.Int64
	sent     atomic.Int64

	mu      sync.Mutex
	samples []sample
}

func newLoad(base string, tenants []TenantLoad, dur, drain time.Duration) *load {
	l := &load{base: base, tenants: tenants, dur: dur, drain: drain}
	k := 0
	for _, tl := range tenants {
		cs := make([]*http.Client, tl.ips())
		for i := range cs {
			cs[i] = &http.Client{Transport: clientTransport(addrFor(k))}
			k++
		}
		l.clients = append(l.clients, cs)
		l.holds = append(l.holds, make([]atomic.Int64, tl.users()))
	}
	return l
}

// clientTransport is a keep-alive transport whose connections leave from
// src.
func clientTransport(src net.IP) *http.Transport {
	d := &net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: src}}
	return &http.Transport{
		DialContext:         d.DialContext,
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
}

func (l *load) close() {
	for _, cs := range l.clients {
		for _, c := range cs {
			c.CloseIdleConnections()
		}
	}
}

// run sends every tenant's arrivals for l.dur, then waits up to l.drain for
// the requests still open and cancels the rest (they are recorded as
// timeouts: the benchmark gave up on them). It returns the samples.
func (l *load) run(ctx context.Context, seed uint64) []sample {
	start := time.Now()
	reqCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var reqs, gens sync.WaitGroup
	for i := range l.tenants {
		gens.Go(func() { l.generate(ctx, reqCtx, &reqs, i, start, seed) })
	}
	gens.Wait()
	drainOrCancel(&reqs, l.drain, cancel)
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.samples
}

// drainOrCancel waits for reqs; once drain has passed, it calls cancel,
// which must end them, and waits for them to end.
func drainOrCancel(reqs *sync.WaitGroup, drain time.Duration, cancel context.CancelFunc) {
	done := make(chan struct{})
	go func() { reqs.Wait(); close(done) }()
	t := time.NewTimer(drain)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		cancel()
		<-done
	}
}

// tenantStream is the random stream of tenant id's arrivals (with the
// run's seed): keyed by its ID, not its place in the scenario, so that an
// innocent tenant sends the same requests, drawing the same service times
// (demoapi.JitterHeader), in the quiet baseline, which has no noisy
// tenants, and in every mode's run.
func tenantStream(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

// generate is tenant i's arrival loop. It is bounded in time (l.dur) and in
// count (twice the arrivals its peak rate would make).
func (l *load) generate(ctx, reqCtx context.Context, reqs *sync.WaitGroup, i int, start time.Time, seed uint64) {
	tl := &l.tenants[i]
	rng := rand.New(rand.NewPCG(seed, tenantStream(tl.ID)))
	var wsum float64
	for _, c := range tl.Calls {
		wsum += c.Weight
	}
	dur := l.dur.Seconds()
	limit := int(2*tl.peakRate()*dur) + 100
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	next := 0.0 // seconds since start
	for range limit {
		rate := tl.Rate * tl.Ramp.factor(next/dur)
		if tl.OnOff.silent(next) {
			rate = 0
		}
		gap := 0.01 // idle tenants look again 10 ms later
		if rate > 0 {
			gap = 1 / rate
			if tl.Arrivals == Poisson {
				gap = rng.ExpFloat64() / rate
			}
		}
		next += gap
		if next >= dur {
			return
		}
		if rate <= 0 {
			continue
		}
		// Open loop: wait for the arrival's time whatever the server
		// does; if the generator fell behind, send at once.
		if wait := time.Until(start.Add(time.Duration(next * float64(time.Second)))); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		}
		call := pick(tl.Calls, rng.Float64()*wsum)
		u := rng.IntN(tl.users())
		z := rng.NormFloat64()
		s := sample{tenant: i, crit: call.Criticality, at: time.Since(start)}
		if call.Tokens != nil {
			// From the arrival's own normal: a completion asks the same
			// tokens in every run, as a request draws the same service
			// time.
			s.tokens = call.Tokens.draw(z)
			sep := "?"
			if strings.Contains(call.Path, "?") {
				sep = "&"
			}
			call.Path += sep + "tokens=" + strconv.Itoa(s.tokens)
		}
		if tl.HonourRetryAfter && time.Now().UnixNano() < l.holds[i][u].Load() {
			s.outcome = Deferred
			l.record(s)
			continue
		}
		if l.inFlight.Add(1) > maxInFlight {
			l.inFlight.Add(-1)
			s.outcome, s.layer = Failed, "generator"
			l.record(s)
			continue
		}
		l.sent.Add(1)
		client := l.clients[i][u%tl.ips()]
		reqs.Go(func() {
			defer l.inFlight.Add(-1)
			l.do(reqCtx, client, tl, call, u, z, &l.holds[i][u], s)
		})
	}
}

// pick returns the call whose cumulative weight covers x.
func pick(calls []Call, x float64) Call {
	for _, c := range calls {
		if x < c.Weight {
			return c
		}
		x -= c.Weight
	}
	return calls[len(calls)-1]
}

// do sends one request and records what became of it.
func (l *load) do(ctx context.Context, client *http.Client, tl *TenantLoad, call Call, user int, z float64, hold *atomic.Int64, s sample) {
	ctx, cancel := context.WithTimeout(ctx, tl.Timeout)
	defer cancel()
	t0 := time.Now()
	s.outcome = Failed
	defer func() {
		s.latency = time.Since(t0)
		if s.outcome == TimedOut {
			s.latency = max(s.latency, tl.Timeout)
		}
		l.record(s)
	}()
	req, err := http.NewRequestWithContext(ctx, call.Method, l.base+call.Path, nil)
	if err != nil {
		return
	}
	req.Header.Set("Authorization", "Bearer "+tl.Key)
	req.Header.Set(demoapi.JitterHeader, strconv.FormatFloat(z, 'g', -1, 64))
	resp, err := client.Do(req)
	if err == nil {
		var body []byte
		body, err = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if err == nil {
			l.classify(&s, resp, body, tl.HonourRetryAfter, hold)
			return
		}
	}
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		s.outcome = TimedOut
	}
}

// classify sets s's outcome from a response and, for a user honouring
// Retry-After, extends its hold.
func (l *load) classify(s *sample, resp *http.Response, body []byte, honour bool, hold *atomic.Int64) {
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		s.outcome = OK
		return
	case resp.StatusCode == http.StatusTooManyRequests:
		s.outcome = Rejected429
	case resp.StatusCode == http.StatusServiceUnavailable:
		s.outcome = Rejected503
	default:
		s.outcome = Failed
		return
	}
	var rej struct {
		Layer  string `json:"layer"`
		Reason string `json:"reason"`
	}
	if json.Unmarshal(body, &rej) == nil && rej.Layer != "" {
		s.layer, s.reason = rej.Layer, rej.Reason
	} else {
		s.layer = "unknown"
	}
	if !honour {
		return
	}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
		until := time.Now().Add(time.Duration(min(secs, 3600)) * time.Second).UnixNano()
		for {
			cur := hold.Load()
			if cur >= until || hold.CompareAndSwap(cur, until) {
				break
			}
		}
	}
}

func (l *load) record(s sample) {
	l.mu.Lock()
	l.samples = append(l.samples, s)
	l.mu.Unlock()
}

// nan0 turns NaN into 0 for JSON, which has no NaN.
func nan0(f float64) float64 {
	if math.IsNaN(f) {
		return 0
	}
	return f
}
