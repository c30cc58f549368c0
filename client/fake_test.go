package client_test

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// virtualClock is a client.Clock whose Sleep moves its own time forward at
// once and records the wait: tests assert exact waits without waiting. It
// starts at the real time, so that context deadlines computed from it are
// in the real future too. It is safe for concurrent use.
type virtualClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func newVirtualClock() *virtualClock { return &virtualClock{now: time.Now()} }

func (c *virtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *virtualClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(max(d, 0))
	return nil
}

// Advance moves the clock forward by d without recording a sleep.
func (c *virtualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Sleeps returns the waits so far and forgets them.
func (c *virtualClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sleeps
	c.sleeps = nil
	return s
}

// reply is one scripted response.
type reply struct {
	status int
	header map[string]string
	body   string
}

// rejection returns a reply with fairgate's JSON body and Retry-After.
func rejection(status int, retryAfter int, layer, reason, requestID string) reply {
	word := "rate_limited"
	if status == http.StatusServiceUnavailable {
		word = "overloaded"
	}
	b, _ := json.Marshal(map[string]any{"error": word, "message": "Try later.", "layer": layer, "reason": reason,
		"retry_after": retryAfter, "request_id": requestID})
	h := map[string]string{"Content-Type": "application/json", "X-Request-Id": requestID}
	if retryAfter > 0 {
		h["Retry-After"] = strconv.Itoa(retryAfter)
	}
	return reply{status: status, header: h, body: string(b)}
}

// arrival is what a scripted server saw of one request.
type arrival struct {
	at     time.Time // on the test's clock
	method string
	body   string
}

// script is an upstream that answers with its replies in turn, repeating
// the last, and records what arrived.
type script struct {
	clock   *virtualClock
	mu      sync.Mutex
	replies []reply
	seen    []arrival
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.seen = append(s.seen, arrival{s.clock.Now(), r.Method, string(b)})
	rep := s.replies[min(len(s.seen), len(s.replies))-1]
	s.mu.Unlock()
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(rep.status)
	io.WriteString(w, rep.body)
}

func (s *script) arrivals() []arrival {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]arrival(nil), s.seen...)
}

// serve starts s on loopback and returns its URL.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// tokenBucket is an upstream that enforces a token bucket on the test's
// clock and answers as fairgate does: RateLimit-Policy and RateLimit (or
// only the RateLimit-Limit/-Remaining/-Reset trio), and a 429 with
// Retry-After computed from the bucket. A request costs costs[path] tokens
// (1 when absent).
type tokenBucket struct {
	clock       *virtualClock
	burst, rate float64
	trioOnly    bool
	costs       map[string]float64

	mu       sync.Mutex
	tokens   float64
	last     time.Time
	admitted int
	limited  int
	units    float64 // tokens taken by admitted requests
}

func (b *tokenBucket) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cost := 1.0
	if c, ok := b.costs[r.URL.Path]; ok {
		cost = c
	}
	b.mu.Lock()
	now := b.clock.Now()
	if b.last.IsZero() {
		b.tokens = b.burst
	} else {
		b.tokens = min(b.burst, b.tokens+b.rate*now.Sub(b.last).Seconds())
	}
	b.last = now
	ok := b.tokens >= cost
	if ok {
		b.tokens -= cost
		b.admitted++
		b.units += cost
	} else {
		b.limited++
	}
	tokens := b.tokens
	b.mu.Unlock()

	h := w.Header()
	reset := int64(math.Ceil((b.burst - tokens) / b.rate))
	remaining := int64(math.Floor(tokens))
	if b.trioOnly {
		h.Set("RateLimit-Limit", strconv.FormatFloat(b.burst, 'f', -1, 64))
		h.Set("RateLimit-Remaining", strconv.FormatInt(remaining, 10))
		h.Set("RateLimit-Reset", strconv.FormatInt(reset, 10))
	} else {
		h.Set("RateLimit-Policy", `"tenant";q=`+strconv.FormatFloat(b.burst, 'f', -1, 64)+`;w=`+strconv.FormatInt(int64(math.Ceil(b.burst/b.rate)), 10))
		h.Set("RateLimit", `"tenant";r=`+strconv.FormatInt(remaining, 10)+`;t=`+strconv.FormatInt(reset, 10))
	}
	if !ok {
		ra := max(int(math.Ceil((cost-tokens)/b.rate)), 1)
		rep := rejection(http.StatusTooManyRequests, ra, "rate", "tenant_quota", "req")
		for k, v := range rep.header {
			h.Set(k, v)
		}
		w.WriteHeader(rep.status)
		io.WriteString(w, rep.body)
		return
	}
	io.WriteString(w, "ok")
}

func (b *tokenBucket) counts() (admitted, limited int, units float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.admitted, b.limited, b.units
}

// quotaServer is an upstream that answers as fairgate's rate layer does,
// on time.Now (a synctest bubble's clock): a request is charged its
// route's cost on the tenant's bucket and, for a route with a group, on
// the group's too, all or nothing. RateLimit-Policy names every bucket
// charged, RateLimit the tightest (the refusing one with the longest
// wait, else the one with the fewest tokens left); a refusal is a 429
// with Retry-After and the reason tenant_quota or group_quota. It is safe
// for concurrent use.
type quotaServer struct {
	mu      sync.Mutex
	buckets map[string]*simQuota // "tenant" and the groups'
	routes  map[string]quotaRoute
	served  map[string]*servedCount // by path
}

// quotaRoute is a path's cost and its group ("" for none).
type quotaRoute struct {
	cost  float64
	group string
}

type simQuota struct {
	name                string
	burst, rate, tokens float64
	last                time.Time
}

type servedCount struct{ admitted, refused int }

// newQuotaServer returns a server with the tenant's bucket and the groups'
// ({burst, rate} each), full, and the routes by path (cost 1 and no group
// when absent).
func newQuotaServer(tenant [2]float64, groups map[string][2]float64, routes map[string]quotaRoute) *quotaServer {
	s := &quotaServer{buckets: map[string]*simQuota{}, routes: routes, served: map[string]*servedCount{}}
	s.buckets["tenant"] = &simQuota{name: "tenant", burst: tenant[0], rate: tenant[1], tokens: tenant[0]}
	for g, q := range groups {
		s.buckets[g] = &simQuota{name: g, burst: q[0], rate: q[1], tokens: q[0]}
	}
	return s
}

func (s *quotaServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt, ok := s.routes[r.URL.Path]
	if !ok {
		rt.cost = 1
	}
	s.mu.Lock()
	now := time.Now()
	bs := []*simQuota{s.buckets["tenant"]}
	if rt.group != "" {
		bs = append(bs, s.buckets[rt.group])
	}
	refuser, wait := -1, 0.0
	for i, b := range bs {
		if !b.last.IsZero() {
			b.tokens = min(b.burst, b.tokens+b.rate*now.Sub(b.last).Seconds())
		}
		b.last = now
		if wt := (rt.cost - b.tokens) / b.rate; wt > 0 && wt > wait {
			refuser, wait = i, wt
		}
	}
	tight := refuser
	if refuser < 0 {
		tight = 0
		for i, b := range bs {
			b.tokens -= rt.cost
			if b.tokens < bs[tight].tokens {
				tight = i
			}
		}
	}
	var policy []byte
	for i, b := range bs {
		if i > 0 {
			policy = append(policy, ", "...)
		}
		policy = strconv.AppendQuote(policy, b.name)
		policy = append(policy, ";q="...)
		policy = strconv.AppendFloat(policy, b.burst, 'f', -1, 64)
		policy = append(policy, ";w="...)
		policy = strconv.AppendInt(policy, int64(math.Ceil(b.burst/b.rate)), 10)
	}
	tb := bs[tight]
	state := strconv.Quote(tb.name) + ";r=" + strconv.FormatInt(int64(math.Floor(tb.tokens)), 10) +
		";t=" + strconv.FormatInt(int64(math.Ceil((tb.burst-tb.tokens)/tb.rate)), 10)
	c := s.served[r.URL.Path]
	if c == nil {
		c = &servedCount{}
		s.served[r.URL.Path] = c
	}
	if refuser < 0 {
		c.admitted++
	} else {
		c.refused++
	}
	s.mu.Unlock()

	h := w.Header()
	h.Set("RateLimit-Policy", string(policy))
	h.Set("RateLimit", state)
	if refuser < 0 {
		io.WriteString(w, "ok")
		return
	}
	reason := "tenant_quota"
	if refuser > 0 {
		reason = "group_quota"
	}
	rep := rejection(http.StatusTooManyRequests, max(int(math.Ceil(wait)), 1), "rate", reason, "req")
	for k, v := range rep.header {
		h.Set(k, v)
	}
	w.WriteHeader(rep.status)
	io.WriteString(w, rep.body)
}

// count returns what the server admitted and refused on path.
func (s *quotaServer) count(path string) (admitted, refused int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.served[path]; c != nil {
		return c.admitted, c.refused
	}
	return 0, 0
}
