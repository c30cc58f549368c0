package client

import (
	"bytes"
	"context"
	"fmt"
	"hash/maphash"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Transport is an http.RoundTripper that cooperates with fairgate's client
// contract: it waits out Retry-After, retries what is safe to retry within
// a budget, and paces itself from the RateLimit headers. Create it with
// New; it is safe for concurrent use.
type Transport struct {
	cfg    Config // with defaults
	budget *budget
	seed   maphash.Seed

	randMu sync.Mutex
	rand   *rand.Rand // nil: the global source

	mu    sync.Mutex
	paces map[paceKey]*pace

	requests, attempts, retries, rejections, budgetDenied, paced, pacedWait atomic.Int64
}

var _ http.RoundTripper = (*Transport)(nil)

// paceKey names a quota partition: the host and a hash of the credential
// it is called with, so that two API keys through one Transport are paced
// apart.
type paceKey struct {
	host string
	cred uint64
}

// maxPaces bounds the partitions remembered; beyond it, idle ones are
// forgotten.
const maxPaces = 1024

// New checks cfg and returns a Transport.
func New(cfg Config) (*Transport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	t := &Transport{cfg: cfg, seed: maphash.MakeSeed(), paces: make(map[paceKey]*pace)}
	if !cfg.Budget.Disabled {
		t.budget = newBudget(cfg.Budget)
	}
	if cfg.Rand != nil {
		t.rand = rand.New(cfg.Rand)
	}
	return t, nil
}

// NewClient returns an *http.Client whose transport is New(cfg).
func NewClient(cfg Config) (*http.Client, error) {
	t, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: t}, nil
}

// Stats are a Transport's counters since New.
type Stats struct {
	// Requests is the RoundTrip calls; Attempts the requests sent to
	// Config.Base, retries included; Retries the attempts after a first.
	Requests, Attempts, Retries int64
	// Rejections is the 429 and 503 responses received.
	Rejections int64
	// BudgetDenied is the retries the budget refused.
	BudgetDenied int64
	// Paced is the attempts that pacing delayed, PacedWait their total
	// delay.
	Paced     int64
	PacedWait time.Duration
}

// Stats returns the transport's counters.
func (t *Transport) Stats() Stats {
	return Stats{
		Requests: t.requests.Load(), Attempts: t.attempts.Load(), Retries: t.retries.Load(),
		Rejections: t.rejections.Load(), BudgetDenied: t.budgetDenied.Load(),
		Paced: t.paced.Load(), PacedWait: time.Duration(t.pacedWait.Load()),
	}
}

// CloseIdleConnections closes the idle connections of Config.Base, when
// it can.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.cfg.Base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// maxBodyRead is how much of a rejection's body is read to decode it.
const maxBodyRead = 64 << 10

// RoundTrip sends req, waiting and retrying as the package doc describes.
// A 429 or 503 it gives up on is returned as a *RejectedError (or, with
// Config.RejectionAsResponse, as the response); every other response,
// whatever its status, is returned as is.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	deadline, _ := ctx.Deadline()
	t.requests.Add(1)
	if t.budget != nil {
		t.budget.deposit(t.cfg.Clock.Now())
	}
	var p *pace
	var key uint64
	if !t.cfg.DisablePacing {
		p, key = t.paceFor(req), t.routeKey(req)
	}
	canRetry := retryable(req)
	var rej *RejectedError
	for attempt := 1; ; attempt++ {
		var res reservation
		if p != nil {
			var err error
			if res, err = t.paceWait(ctx, p, key, deadline); err != nil {
				if rej == nil {
					closeBody(req)
					return nil, fmt.Errorf("client: pacing %s: %w", req.URL.Host, err)
				}
				rej.Cause = err
				return nil, rej
			}
		}
		out := req
		if attempt > 1 {
			var err error
			if out, err = replay(req); err != nil {
				return nil, fmt.Errorf("client: replay body: %w", err)
			}
			t.retries.Add(1)
		}
		t.attempts.Add(1)
		resp, err := t.cfg.Base.RoundTrip(out)
		if err != nil {
			return nil, err
		}
		status := resp.StatusCode
		rejected := status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
		now := t.cfg.Clock.Now()
		var ra time.Duration
		if rejected {
			ra = retryAfter(resp.Header, now)
		}
		if !rejected {
			if p != nil {
				p.observe(now, resp.Header, status, 0, "", res)
			}
			return resp, nil
		}
		t.rejections.Add(1)
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxBodyRead))
		rej = decodeRejection(status, resp.Header, body, ra)
		rej.Attempts = attempt
		if p != nil {
			p.observe(now, resp.Header, status, ra, rej.Reason, res)
		}

		var cause error
		var wait time.Duration
		switch {
		case !canRetry:
			cause = ErrNotRetryable
		case attempt >= t.cfg.MaxAttempts:
			cause = ErrAttemptsExhausted
		default:
			wait, cause = t.retryWait(status, rej.RetryAfter, attempt-1, now, deadline)
		}
		if cause == nil && t.budget != nil && !t.budget.withdraw(now) {
			t.budgetDenied.Add(1)
			cause = ErrBudgetExhausted
		}
		if cause == nil {
			drain(resp.Body)
			if err := t.cfg.Clock.Sleep(ctx, wait); err != nil {
				rej.Cause = err
				return nil, rej
			}
			continue
		}
		rej.Cause = cause
		if t.cfg.RejectionAsResponse {
			resp.Body = readCloser{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
			return resp, nil
		}
		drain(resp.Body)
		return nil, rej
	}
}

// retryWait returns how long to wait before retry n+1 (n = 0 for the
// first retry) after a rejection with status and Retry-After ra, or why
// not to retry.
//
// A 429 with Retry-After waits exactly that: the tokens are back then, and
// pacing spreads the sends after it. A 503, or a rejection without
// Retry-After, waits ra plus full jitter: a uniform draw from
// [0, window), window = max(ra, BackoffBase) × 2ⁿ, at most MaxBackoff,
// and cut so that the wait stays within MaxWait and before the deadline.
// The wait is never shorter than ra; an ra beyond MaxWait or the deadline
// is not waited for at all.
func (t *Transport) retryWait(status int, ra time.Duration, n int, now, deadline time.Time) (time.Duration, error) {
	if ra > t.cfg.MaxWait {
		return 0, ErrWaitTooLong
	}
	left := t.cfg.MaxWait
	if !deadline.IsZero() {
		dl := deadline.Sub(now)
		if ra >= dl {
			return 0, ErrDeadline
		}
		left = min(left, dl)
	}
	if status == http.StatusTooManyRequests && ra > 0 {
		return ra, nil
	}
	window := max(ra, t.cfg.BackoffBase)
	for i := 0; i < n && window < t.cfg.MaxBackoff; i++ {
		window *= 2
	}
	window = min(window, t.cfg.MaxBackoff, left-ra)
	return ra + time.Duration(t.float64()*float64(window)), nil
}

// float64 draws from [0, 1).
func (t *Transport) float64() float64 {
	if t.rand == nil {
		return rand.Float64()
	}
	t.randMu.Lock()
	defer t.randMu.Unlock()
	return t.rand.Float64()
}

// paceWait waits for the next send slot of route key in p and returns
// its reservation. It returns ErrDeadline or ErrWaitTooLong at once,
// reserving nothing, when the slot is past the deadline or MaxWait away,
// and ctx.Err() when ctx ends during the wait.
func (t *Transport) paceWait(ctx context.Context, p *pace, key uint64, deadline time.Time) (reservation, error) {
	now := t.cfg.Clock.Now()
	limit, cause := now.Add(t.cfg.MaxWait), ErrWaitTooLong
	if !deadline.IsZero() && deadline.Before(limit) {
		limit, cause = deadline, ErrDeadline
	}
	res, ok := p.reserve(now, limit, key)
	if !ok {
		return res, fmt.Errorf("%w (next send in %v)", cause, res.at.Sub(now))
	}
	d := res.at.Sub(now)
	if d <= 0 {
		return res, nil
	}
	t.paced.Add(1)
	t.pacedWait.Add(int64(d))
	if err := t.cfg.Clock.Sleep(ctx, d); err != nil {
		p.cancel(res)
		return res, err
	}
	return res, nil
}

// paceFor returns the pace of req's host and credential.
func (t *Transport) paceFor(req *http.Request) *pace {
	k := paceKey{host: req.URL.Host, cred: t.credential(req.Header)}
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.paces[k]
	if p == nil {
		if len(t.paces) >= maxPaces {
			now := t.cfg.Clock.Now()
			for k, p := range t.paces {
				if p.idle(now) {
					delete(t.paces, k)
				}
			}
		}
		p = &pace{}
		t.paces[k] = p
	}
	return p
}

// routeKey hashes req's route: Config.Route's name for it, else its
// method and URL path.
func (t *Transport) routeKey(req *http.Request) uint64 {
	var h maphash.Hash
	h.SetSeed(t.seed)
	if t.cfg.Route != nil {
		h.WriteString(t.cfg.Route(req))
		return h.Sum64()
	}
	m := req.Method
	if m == "" {
		m = http.MethodGet
	}
	h.WriteString(m)
	h.WriteByte(' ')
	if path := req.URL.Path; path != "" {
		h.WriteString(path)
	} else {
		h.WriteByte('/')
	}
	return h.Sum64()
}

// credential hashes the headers fairgate takes an API key from.
func (t *Transport) credential(h http.Header) uint64 {
	var a, k string
	if v := h["Authorization"]; len(v) > 0 {
		a = v[0]
	}
	if v := h["X-Api-Key"]; len(v) > 0 {
		k = v[0]
	}
	if a == "" && k == "" {
		return 0
	}
	return maphash.String(t.seed, a) ^ 31*maphash.String(t.seed, k)
}

// retryable reports whether req may be sent again: its method is
// idempotent (RFC 9110 §9.2.2) or it carries an Idempotency-Key, and its
// body can be replayed.
func retryable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut, http.MethodDelete, http.MethodTrace:
	default:
		if req.Header.Get("Idempotency-Key") == "" {
			return false
		}
	}
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// replay returns a copy of req with a fresh body, for a retry.
func replay(req *http.Request) (*http.Request, error) {
	r := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		b, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		r.Body = b
	}
	return r, nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// drain reads a little of what is left of a body, so that its connection
// can be reused, and closes it.
func drain(b io.ReadCloser) {
	io.CopyN(io.Discard, b, 4<<10)
	b.Close()
}

type readCloser struct {
	io.Reader
	io.Closer
}
