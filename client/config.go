package client

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"time"
)

// Config is a Transport's configuration. The zero value is a working
// default: three attempts, waits of at most 30 s, a 10 % retry budget, and
// pacing from the RateLimit headers.
type Config struct {
	// Base sends each attempt. Nil means http.DefaultTransport.
	Base http.RoundTripper

	// MaxAttempts bounds the attempts per request, the first included.
	// Zero means 3; 1 turns retries off.
	MaxAttempts int

	// MaxWait is the longest the transport waits before one attempt,
	// whether for a Retry-After, a backoff or pacing. A server asking for
	// a longer Retry-After gets its rejection returned at once
	// (ErrWaitTooLong): the transport never retries earlier than asked.
	// Zero means 30s.
	MaxWait time.Duration

	// BackoffBase is the first backoff window of a 503 (or a 429 without
	// Retry-After) when the server gives no Retry-After; with one, the
	// window starts at the Retry-After. The window doubles with every
	// retry of the request. Zero means 250ms.
	BackoffBase time.Duration

	// MaxBackoff caps the backoff window (the random part of a 503's wait,
	// added to its Retry-After). Zero means 10s.
	MaxBackoff time.Duration

	// Budget limits retries across all requests of the transport, so that
	// a fleet of clients cannot multiply an overload.
	Budget BudgetConfig

	// DisablePacing turns off pacing from the RateLimit headers and the
	// holds a 429 puts on the later requests of its credential: each
	// request then waits only for its own Retry-After. The zero value
	// paces.
	DisablePacing bool

	// Route names a request's route for pacing: a quota paces the
	// requests of the routes whose responses named it, and the cost of a
	// request is learned per route (see the package doc). Nil means the
	// method and the URL path, without the query, so that /users/1 and
	// /users/2 are two routes, each paced at first only by the quotas
	// that every response named; a function returning the server's route
	// template ("GET /users/{id}") lets what one path taught pace them
	// all. Unless pacing is disabled, it is called once per request,
	// before the first attempt.
	Route func(*http.Request) string

	// RejectionAsResponse returns the last 429 or 503 as the response
	// (err nil, body intact), as the http.RoundTripper contract asks, when
	// the transport gives up on it. The zero value returns a
	// *RejectedError instead. A retry that cannot be sent after its wait
	// (the context ended, or pacing would pass the deadline) is an error
	// either way.
	RejectionAsResponse bool

	// Clock reads the time and waits. Nil means the system clock.
	Clock Clock

	// Rand is the source of backoff jitter. Nil means math/rand/v2's
	// global source. A seeded source (rand.NewPCG(1, 2)) makes the waits
	// reproducible; the transport serializes its calls to it.
	Rand rand.Source
}

// BudgetConfig is a retry budget in the manner of Finagle's RetryBudget
// and gRPC's retry throttling: over any Window, retries may be at most
// Ratio × the requests made plus MinPerSecond × Window.
type BudgetConfig struct {
	// Disabled lets every retry through that the other rules allow. Only
	// for tests and negative controls: without a budget, a fleet of
	// clients retrying into an overload multiplies it.
	Disabled bool
	// Ratio is the retries allowed per request over the window, in
	// [0, 1]. Zero means 0.1.
	Ratio float64
	// MinPerSecond is the retries per second allowed however few requests
	// there are, so a client with little traffic can still retry. Zero
	// means 1; negative means none.
	MinPerSecond float64
	// Window is how long a request counts towards the budget and a retry
	// against it. Zero means 10s.
	Window time.Duration
}

const (
	defaultMaxAttempts  = 3
	defaultMaxWait      = 30 * time.Second
	defaultBackoffBase  = 250 * time.Millisecond
	defaultMaxBackoff   = 10 * time.Second
	defaultRatio        = 0.1
	defaultMinPerSecond = 1
	defaultWindow       = 10 * time.Second
)

// Validate reports the first field out of range, by name.
func (c *Config) Validate() error {
	switch {
	case c.MaxAttempts < 0:
		return fmt.Errorf("client: Config.MaxAttempts: %d is negative", c.MaxAttempts)
	case c.MaxWait < 0:
		return fmt.Errorf("client: Config.MaxWait: %v is negative", c.MaxWait)
	case c.BackoffBase < 0:
		return fmt.Errorf("client: Config.BackoffBase: %v is negative", c.BackoffBase)
	case c.MaxBackoff < 0:
		return fmt.Errorf("client: Config.MaxBackoff: %v is negative", c.MaxBackoff)
	}
	return c.Budget.validate()
}

func (b *BudgetConfig) validate() error {
	switch {
	case math.IsNaN(b.Ratio) || b.Ratio < 0 || b.Ratio > 1:
		return fmt.Errorf("client: Config.Budget.Ratio: %v is outside [0, 1]", b.Ratio)
	case math.IsNaN(b.MinPerSecond) || math.IsInf(b.MinPerSecond, 0):
		return fmt.Errorf("client: Config.Budget.MinPerSecond: %v is not a number of retries", b.MinPerSecond)
	case b.Window < 0:
		return fmt.Errorf("client: Config.Budget.Window: %v is negative", b.Window)
	}
	return nil
}

// withDefaults returns c with its zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Base == nil {
		c.Base = http.DefaultTransport
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = defaultMaxAttempts
	}
	if c.MaxWait == 0 {
		c.MaxWait = defaultMaxWait
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = defaultBackoffBase
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = defaultMaxBackoff
	}
	if c.Budget.Ratio == 0 {
		c.Budget.Ratio = defaultRatio
	}
	switch {
	case c.Budget.MinPerSecond == 0:
		c.Budget.MinPerSecond = defaultMinPerSecond
	case c.Budget.MinPerSecond < 0:
		c.Budget.MinPerSecond = 0
	}
	if c.Budget.Window == 0 {
		c.Budget.Window = defaultWindow
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	return c
}
