package bench

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/fairgate/fairgate/client"
)

// stormLoad is the retry-storm's open-loop generator: every user of every
// tenant is one simulated client, with its own client.Transport for
// RetryClient, over the transport of its source address.
type stormLoad struct {
	base    string
	tenants []TenantLoad
	rt      Retrier
	addrs   []*http.Transport
	clients [][]*http.Client // per tenant, per user
	coop    []*client.Transport

	mu   sync.Mutex
	recs []logical
}

func newStormLoad(base string, tenants []TenantLoad, rt Retrier) (*stormLoad, error) {
	g := &stormLoad{base: base, tenants: tenants, rt: rt}
	for _, tl := range tenants {
		first := len(g.addrs)
		for range tl.ips() {
			g.addrs = append(g.addrs, clientTransport(addrFor(len(g.addrs))))
		}
		cs := make([]*http.Client, tl.users())
		for u := range cs {
			var rtp http.RoundTripper = g.addrs[first+u%tl.ips()]
			if rt == RetryClient {
				t, err := client.New(client.Config{Base: rtp, MaxAttempts: stormAttempts})
				if err != nil {
					return nil, err
				}
				g.coop = append(g.coop, t)
				rtp = t
			}
			cs[u] = &http.Client{Transport: rtp}
		}
		g.clients = append(g.clients, cs)
	}
	return g, nil
}

func (g *stormLoad) close() {
	for _, t := range g.addrs {
		t.CloseIdleConnections()
	}
}

// clientAttempts is the HTTP requests the client package's Transports
// sent.
func (g *stormLoad) clientAttempts() int {
	var n int64
	for _, t := range g.coop {
		n += t.Stats().Attempts
	}
	return int(n)
}

// run sends Poisson arrivals for dur, waits up to drain for the logical
// requests still open, cancels the rest, and returns the records.
func (g *stormLoad) run(ctx context.Context, dur, drain time.Duration, seed uint64) []logical {
	start := time.Now()
	reqCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var reqs, gens sync.WaitGroup
	for i := range g.tenants {
		gens.Go(func() {
			tl := &g.tenants[i]
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			next := time.Duration(0)
			timer := time.NewTimer(0)
			defer timer.Stop()
			for {
				next += time.Duration(rng.ExpFloat64() / tl.Rate * float64(time.Second))
				if next >= dur {
					return
				}
				timer.Reset(time.Until(start.Add(next)))
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				}
				c := g.clients[i][rng.IntN(tl.users())]
				reqs.Go(func() { g.record(g.request(reqCtx, c, tl, start)) })
			}
		})
	}
	gens.Wait()
	drainOrCancel(&reqs, drain, cancel)
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.recs
}

// request sends one logical request: once through the client package,
// or in the hand-written loop that retries a 429 or 503 at once.
func (g *stormLoad) request(ctx context.Context, c *http.Client, tl *TenantLoad, start time.Time) logical {
	rec := logical{at: time.Since(start)}
	ctx, cancel := context.WithTimeout(ctx, tl.Timeout)
	defer cancel()
	for rec.attempts < stormAttempts {
		rec.attempts++
		status := g.send(ctx, c, tl)
		rec.ok = status >= 200 && status < 300
		if g.rt == RetryClient || (status != http.StatusTooManyRequests && status != http.StatusServiceUnavailable) {
			break
		}
	}
	rec.done = time.Since(start)
	return rec
}

// send sends one request and returns its status, 0 for an error (the
// client package's *RejectedError included).
func (g *stormLoad) send(ctx context.Context, c *http.Client, tl *TenantLoad) int {
	call := tl.Calls[0]
	req, err := http.NewRequestWithContext(ctx, call.Method, g.base+call.Path, nil)
	if err != nil {
		return 0
	}
	req.Header.Set("Authorization", "Bearer "+tl.Key)
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	_, err = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if err != nil {
		return 0
	}
	return resp.StatusCode
}

func (g *stormLoad) record(r logical) {
	g.mu.Lock()
	g.recs = append(g.recs, r)
	g.mu.Unlock()
}
