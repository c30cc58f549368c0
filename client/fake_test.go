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
