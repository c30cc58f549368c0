package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// Store is the shared ratelimit.Store: token buckets in Redis, decided by one
// Lua script per take with Redis's clock, so every instance sharing the
// Redis (single node, Sentinel or Cluster) enforces one quota between them.
//
// Around the script: a denial cache answers takes already known to be
// denied; concurrent takes share pipelines (BatchConfig); each take is
// bounded by Config.Timeout; a circuit breaker stops asking a failing Redis;
// and while Redis cannot answer, Config.FailurePolicy decides.
//
// A Store is safe for concurrent use. It starts no goroutine. Its zero value
// is not usable; call New.
type Store struct {
	client  redis.UniversalClient
	cfg     Config // with defaults
	script  *redis.Script
	breaker *gobreaker.TwoStepCircuitBreaker[struct{}]
	batch   *batcher               // nil when batching is disabled
	deny    *denyCache             // nil when the denial cache is disabled
	local   *ratelimit.MemoryStore // nil unless the policy is Local
	// backstop is the Local policy's fair global backstop.
	backstop localBackstop
	now      func() time.Time
	opts     Options
	logs     logLimiter
	closed   atomic.Bool
}

// Options are the Store's collaborators. The zero value is usable.
type Options struct {
	// Now is the local clock, used for the denial cache, the Local policy
	// and log rate limiting, never for the shared buckets (Redis's clock
	// decides those). Nil means time.Now. Deadlines always use real time.
	Now func() time.Time
	// Logger receives at most one line per Config.LogEvery about failure
	// policy decisions, and one per breaker state change. Nil means no
	// logging.
	Logger *slog.Logger
	// OnPolicy, if set, is called for every decision made by the failure
	// policy, with the cause (for a metric). It must be fast and must not
	// block.
	OnPolicy func(p FailurePolicy, cause error)
	// OnBreakerChange, if set, is called when the breaker changes state
	// (for a gauge).
	OnBreakerChange func(from, to BreakerState)
}

// BreakerState is the circuit breaker's state.
type BreakerState uint8

const (
	// BreakerClosed: Redis is asked.
	BreakerClosed BreakerState = iota
	// BreakerHalfOpen: one probe is asked; other takes use the policy.
	BreakerHalfOpen
	// BreakerOpen: Redis is not asked; every take uses the policy.
	BreakerOpen
)

// String returns a metric label for s.
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerHalfOpen:
		return "half_open"
	case BreakerOpen:
		return "open"
	default:
		return fmt.Sprintf("BreakerState(%d)", uint8(s))
	}
}

func breakerState(s gobreaker.State) BreakerState {
	switch s {
	case gobreaker.StateHalfOpen:
		return BreakerHalfOpen
	case gobreaker.StateOpen:
		return BreakerOpen
	default:
		return BreakerClosed
	}
}

// New returns a Store deciding on client (which the caller keeps and
// closes; NewClient builds one from cfg). cfg is validated first, so a bad
// config fails before anything is built.
func New(client redis.UniversalClient, cfg Config, o Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: nil client")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	cfg = cfg.withDefaults()
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Store{
		client: client,
		cfg:    cfg,
		script: redis.NewScript(takeLua),
		now:    o.Now,
		opts:   o,
		logs:   logLimiter{every: int64(cfg.LogEvery)},
	}
	failures := uint32(cfg.Breaker.Failures)
	s.breaker = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "redis",
		MaxRequests: 1,
		Timeout:     cfg.Breaker.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		// A caller that gave up says nothing about Redis; neither does an
		// error Redis answered for this script and these arguments (it
		// fails the same way on a healthy server, and must not open the
		// breaker for every other tenant).
		IsExcluded: func(err error) bool {
			var sf *sharedFailure
			return errors.Is(err, context.Canceled) || isScriptError(err) ||
				errors.Is(err, errQueuedPastDeadline) || errors.As(err, &sf)
		},
		OnStateChange: s.breakerChanged,
	})
	if !cfg.Batch.Disabled {
		s.batch = &batcher{max: cfg.Batch.MaxInFlight, run: s.runPipeline}
	}
	if cfg.DenyCacheSize > 0 {
		s.deny = newDenyCache(cfg.DenyCacheSize)
	}
	if cfg.FailurePolicy == Local {
		s.local = ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{Now: o.Now})
	}
	// Best effort, bounded: load the script now so the first decisions do
	// not pay NOSCRIPT and EVAL on top of the dial within their deadline
	// (a cold start could otherwise count towards the breaker). Redis
	// being down at start is not an error: the failure policy covers it.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_ = s.script.Load(ctx, client).Err()
	cancel()
	return s, nil
}

// Take implements ratelimit.Store. Under FailClosed, a take Redis cannot
// answer returns an error matching ErrUnavailable; under the other policies
// Redis trouble is never an error. Decide also says how the take was
// decided.
func (s *Store) Take(ctx context.Context, k ratelimit.BucketKey, l ratelimit.Limit, cost float64) (ratelimit.Result, error) {
	r, _, err := s.Decide(ctx, k, l, cost)
	return r, err
}

// Decide is Take that also returns how the decision was made. The error is
// ErrInvalidTake, ErrClosed, ctx.Err() (returned as is when the caller's
// context ends first), or an *UnavailableError under FailClosed.
func (s *Store) Decide(ctx context.Context, k ratelimit.BucketKey, l ratelimit.Limit, cost float64) (ratelimit.Result, Outcome, error) {
	if !validTake(l, cost) {
		return ratelimit.Result{}, Outcome{}, fmt.Errorf("%w: rate %v, burst %v, cost %v", ErrInvalidTake, l.Rate, l.Burst, cost)
	}
	if s.closed.Load() {
		return ratelimit.Result{}, Outcome{}, ErrClosed
	}
	if s.deny != nil {
		if r, ok := s.deny.get(k, l, cost, s.now()); ok {
			return r, Outcome{Source: FromDenyCache}, nil
		}
	}
	done, err := s.breaker.Allow()
	if err != nil {
		return s.fallback(k, l, cost, ErrBreakerOpen)
	}
	// Taken before the script runs, so start + RetryAfter is never later
	// than the refill the script computed: the denial cache must not deny
	// past it.
	start := s.now()
	rep, err := s.eval(ctx, bucketKey(k), l, cost)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			done(context.Canceled) // excluded: the caller gave up
			return ratelimit.Result{}, Outcome{}, ctxErr
		}
		done(err)
		return s.fallback(k, l, cost, err)
	}
	done(nil)
	r := rep.result(l, cost)
	if !r.Allowed && s.deny != nil {
		s.deny.put(k, l, cost, r, start)
	}
	return r, Outcome{Source: FromRedis}, nil
}

// eval runs the script for one take, batched or alone, within Timeout.
// A batched take's deadline ignores ctx's (one caller's short deadline must
// not fail the pipeline it shares); ctx still ends its wait in the queue.
func (s *Store) eval(ctx context.Context, key string, l ratelimit.Limit, cost float64) (reply, error) {
	if s.batch == nil {
		ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		defer cancel()
		v, err := s.script.Run(ctx, s.client, []string{key}, l.Rate, l.Burst, cost).Result()
		if err != nil {
			return reply{}, fmt.Errorf("redisstore: eval: %w", err)
		}
		return decodeReply(v)
	}
	c := callPool.Get().(*call)
	c.key, c.l, c.cost, c.deadline = key, l, cost, time.Now().Add(s.cfg.Timeout)
	err := s.batch.do(ctx, c)
	if err == nil {
		err = c.err
	}
	rep := c.rep
	*c = call{ch: c.ch}
	callPool.Put(c)
	return rep, err
}

// runPipeline sends batch as one pipeline of EVALSHAs, with the earliest
// deadline among its calls, then resends as EVAL those that met NOSCRIPT
// (a restarted or flushed Redis). On a cluster, go-redis splits the
// pipeline by node.
func (s *Store) runPipeline(batch []*call) {
	now := time.Now()
	var deadline time.Time
	live := make([]*call, 0, len(batch))
	for _, c := range batch {
		if !c.deadline.After(now) {
			c.err = errQueuedPastDeadline
			continue
		}
		if deadline.IsZero() || c.deadline.Before(deadline) {
			deadline = c.deadline
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	cmds := s.execPipeline(ctx, live, false)
	var retry []*call
	for i, c := range live {
		if err := cmds[i].Err(); redis.HasErrorPrefix(err, "NOSCRIPT") {
			retry = append(retry, c)
		}
	}
	if len(retry) > 0 {
		s.execPipeline(ctx, retry, true)
	}
}

// execPipeline sends one EVALSHA (or EVAL) per call and sets each call's
// reply or error, except NOSCRIPT errors when !eval, which the caller
// retries.
func (s *Store) execPipeline(ctx context.Context, calls []*call, eval bool) []*redis.Cmd {
	pipe := s.client.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		keys := []string{c.key}
		if eval {
			cmds[i] = s.script.Eval(ctx, pipe, keys, c.l.Rate, c.l.Burst, c.cost)
		} else {
			cmds[i] = s.script.EvalSha(ctx, pipe, keys, c.l.Rate, c.l.Burst, c.cost)
		}
	}
	_, _ = pipe.Exec(ctx) // errors are per command
	counted := false
	for i, c := range calls {
		v, err := cmds[i].Result()
		var re redis.Error
		switch {
		case err == nil:
			c.rep, c.err = decodeReply(v)
		case !eval && redis.HasErrorPrefix(err, "NOSCRIPT"):
		case !errors.As(err, &re) && counted:
			// The round trip failed for the whole pipeline (timeout,
			// connection): one failure for the breaker, not one per call.
			c.err = &sharedFailure{err: fmt.Errorf("redisstore: eval: %w", err)}
		default:
			c.err = fmt.Errorf("redisstore: eval: %w", err)
			counted = counted || !errors.As(err, &re)
		}
	}
	return cmds
}

// errQueuedPastDeadline is a batched call whose deadline passed while it
// waited for a pipeline slot: Redis was never asked, so the breaker does
// not count it.
var errQueuedPastDeadline = fmt.Errorf("redisstore: eval: queued past the deadline: %w", context.DeadlineExceeded)

// sharedFailure is the failure of a pipeline's round trip as seen by every
// call in it but one: the breaker counts a failed round trip once.
type sharedFailure struct{ err error }

func (e *sharedFailure) Error() string { return e.err.Error() }
func (e *sharedFailure) Unwrap() error { return e.err }

// fallback decides by the failure policy because of cause.
func (s *Store) fallback(k ratelimit.BucketKey, l ratelimit.Limit, cost float64, cause error) (ratelimit.Result, Outcome, error) {
	p := s.cfg.FailurePolicy
	now := s.now()
	s.policyApplied(p, cause, now)
	out := Outcome{Source: FromPolicy, Policy: p, Cause: cause}
	switch p {
	case FailOpen:
		// Admitted without reading the bucket: its state is not known.
		return ratelimit.Result{Allowed: true, StateUnknown: true}, out, nil
	case FailClosed:
		return ratelimit.Result{}, out, &UnavailableError{RetryAfter: s.cfg.Breaker.OpenFor, Cause: cause}
	default:
		return s.local.TakeAt(s.local.Clock(), k, localShare(l, cost, s.cfg.Instances), cost), out, nil
	}
}

// localShare is one instance's share of l under the Local policy: rate and
// burst divided by n, but the burst never below the cost when l's own burst
// admits it, so a request the shared bucket could admit is never refused
// forever by every instance.
func localShare(l ratelimit.Limit, cost float64, n int) ratelimit.Limit {
	if n <= 1 {
		return l
	}
	share := ratelimit.Limit{Rate: l.Rate / float64(n), Burst: l.Burst / float64(n)}
	if share.Burst < cost && cost <= l.Burst {
		share.Burst = cost
	}
	return share
}

func (s *Store) policyApplied(p FailurePolicy, cause error, now time.Time) {
	if s.opts.OnPolicy != nil {
		s.opts.OnPolicy(p, cause)
	}
	if s.opts.Logger == nil {
		return
	}
	if n, ok := s.logs.allow(now.UnixNano()); ok {
		s.opts.Logger.Warn("redisstore: Redis unavailable, failure policy applied",
			"policy", p.String(), "cause", cause.Error(), "decisions", n, "breaker", s.BreakerState().String())
	}
}

func (s *Store) breakerChanged(_ string, from, to gobreaker.State) {
	f, t := breakerState(from), breakerState(to)
	if s.opts.OnBreakerChange != nil {
		s.opts.OnBreakerChange(f, t)
	}
	if s.opts.Logger != nil {
		s.opts.Logger.Info("redisstore: circuit breaker", "from", f.String(), "to", t.String())
	}
}

// BreakerState returns the circuit breaker's state now.
func (s *Store) BreakerState() BreakerState { return breakerState(s.breaker.State()) }

// Close makes later decisions fail with ErrClosed. Decisions in flight end
// within their deadline. The Store owns no goroutine and does not close the
// client, which the caller owns.
func (s *Store) Close() error {
	s.closed.Store(true)
	return nil
}

// logLimiter lets one event through per interval and counts the rest.
type logLimiter struct {
	every int64 // ns
	next  atomic.Int64
	count atomic.Int64
}

// allow counts an event at now (Unix ns) and reports whether to log it,
// with the number of events since the last logged one (this one included).
func (l *logLimiter) allow(now int64) (int64, bool) {
	l.count.Add(1)
	next := l.next.Load()
	if now < next || !l.next.CompareAndSwap(next, now+l.every) {
		return 0, false
	}
	return l.count.Swap(0), true
}

var _ ratelimit.Store = (*Store)(nil)

// isScriptError reports whether err is an error reply Redis gave about the
// script or its arguments, rather than about its own health (loading,
// busy, read-only replica, cluster down, out of memory, failing over).
func isScriptError(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	for _, health := range []string{"LOADING", "BUSY", "READONLY", "CLUSTERDOWN", "TRYAGAIN", "OOM", "MASTERDOWN", "NOSCRIPT"} {
		if strings.HasPrefix(msg, health) {
			return false
		}
	}
	return true
}
