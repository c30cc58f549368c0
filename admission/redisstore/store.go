package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

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
// In sync mode (Config.Mode) decisions are local and a goroutine
// reconciles them with Redis every SyncInterval (see syncer).
//
// A Store is safe for concurrent use. It starts no goroutine, except sync
// mode's, which Close stops. Its zero value is not usable; call New.
type Store struct {
	client redis.UniversalClient
	cfg    Config // with defaults
	// main is the only lane, or on a cluster the lane of keys whose
	// master is not known (the cluster's state cannot be loaded).
	main    *lane
	cluster *redis.ClusterClient // nil unless the client is a cluster's
	lanesMu sync.RWMutex
	lanes   map[string]*lane // a cluster's, by master address
	// breakerMu guards each lane's last breaker state, from which the
	// store's (the worst of them) is derived for OnBreakerChange.
	breakerMu sync.Mutex
	breakers  map[string]BreakerState
	deny      *denyCache             // nil when the denial cache is disabled
	local     *ratelimit.MemoryStore // nil unless the policy is Local
	syncer    *syncer                // sync mode's views, and those of limits that sync
	members   *members
	epoch     time.Time // the origin of lanes' failure instants
	now       func() time.Time
	opts      Options
	logs      logLimiter // Redis trouble
	overload  logLimiter // our own queue
	stats     stats
	closed    atomic.Bool
}

// Options are the Store's collaborators. The zero value is usable.
type Options struct {
	// Now is the local clock, used for the denial cache, the Local policy,
	// sync mode's local views and log rate limiting, never for the shared
	// buckets (Redis's clock decides those). Nil means time.Now. Deadlines
	// and sync mode's reconciliation ticker always use real time.
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
		client:   client,
		cfg:      cfg,
		now:      o.Now,
		opts:     o,
		epoch:    time.Now(),
		logs:     logLimiter{every: int64(cfg.LogEvery)},
		overload: logLimiter{every: int64(cfg.LogEvery)},
	}
	s.main = s.newLane("redis")
	s.breakers = map[string]BreakerState{}
	if cc, ok := client.(*redis.ClusterClient); ok {
		s.cluster, s.lanes = cc, map[string]*lane{}
	}
	if cfg.DenyCacheSize > 0 {
		s.deny = newDenyCache(cfg.DenyCacheSize)
	}
	if cfg.FailurePolicy == Local {
		s.local = ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{Now: o.Now})
	}
	// Best effort, bounded: load the scripts now so the first decisions do
	// not pay NOSCRIPT and EVAL on top of the dial within their deadline
	// (a cold start could otherwise count towards the breaker). Redis
	// being down at start is not an error: the failure policy covers it.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_ = takeScript.Load(ctx, client).Err()
	_ = windowScript.Load(ctx, client).Err()
	if s.cluster != nil {
		_ = s.cluster.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			s.laneOf(c.Options().Addr)
			return nil
		})
	}
	cancel()
	s.members = newMembers(s)
	// In exact mode too: a limit may choose sync (ratelimit.ModeSync).
	// Without views its loop has nothing to do.
	s.syncer = newSyncer(s)
	return s, nil
}

// run runs script on keys and args through ln's breaker, batched or alone,
// and returns its reply. The error is ctx's when ctx ended first (check
// ctx.Err()), and otherwise the cause for the failure policy:
// ErrBreakerOpen, ErrOverloaded (our own queue was too long), or Redis's
// error or timeout.
//
// A round trip is bounded by lateFactor × Timeout from the instant it is
// sent, whatever its calls waited before, and not by ctx (one caller's
// short deadline must not fail the pipeline it shares; ctx still ends its
// wait in the queue). A reply later than Timeout is used, and is no
// failure for the breaker (see judge).
func (s *Store) run(ctx context.Context, ln *lane, script *redis.Script, keys []string, args ...any) (any, error) {
	done, err := ln.breaker.Allow()
	if err != nil {
		return nil, ErrBreakerOpen
	}
	c := getCall(script, keys, args...)
	if ln.batch == nil {
		s.runAlone(ctx, ln, c)
	} else {
		err = ln.batch.do(ctx, c)
	}
	var v any
	var verdict error
	if err == nil {
		v, err, verdict = c.v, c.err, c.verdict
	}
	putCall(c)
	if err != nil && ctx.Err() != nil {
		done(context.Canceled) // excluded: the caller gave up
		return nil, ctx.Err()
	}
	done(verdict)
	return v, err
}

// lateFactor × Timeout is when a round trip is given up. Between Timeout
// and that, the reply still decides (a late answer from Redis beats a
// guess) and is counted slow, not failed. The slack absorbs what
// is not Redis's slowness: on a busy host the kernel and Go schedulers
// delay reading a reply that arrived in time by up to about 10 ms.
const lateFactor = 3

// runAlone runs c on its own connection: it waits (up to QueueTimeout)
// for one of the pool's connections, so that waiting for the pool is our
// backlog and not counted against Redis, then runs the round trip. It sets
// c's reply, error and verdict.
func (s *Store) runAlone(ctx context.Context, ln *lane, c *call) {
	select {
	case ln.conns <- struct{}{}:
	default:
		t := time.NewTimer(s.cfg.QueueTimeout)
		select {
		case ln.conns <- struct{}{}:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			c.err = ctx.Err()
			return
		case <-t.C:
			c.err, c.verdict = ErrOverloaded, ErrOverloaded
			return
		}
	}
	defer func() { <-ln.conns }()
	start := time.Now()
	ctx, cancel := context.WithDeadline(ctx, start.Add(lateFactor*s.cfg.Timeout))
	defer cancel()
	v, err := c.script.Run(ctx, s.client, c.keys, c.args...).Result()
	rtt := time.Since(start)
	failed := false
	switch {
	case err == nil:
		c.v = v
	case isRedisError(err):
		c.err = fmt.Errorf("redisstore: eval: %w", err)
		c.verdict = c.err
	default:
		failed = true
		c.err = fmt.Errorf("redisstore: eval: %w", err)
		c.verdict = &sharedFailure{err: c.err}
	}
	s.judge(ln, []*call{c}, start, rtt, failed)
}

// judge counts a round trip sent at start that took rtt and failed as a
// whole or not, and gives the breaker its verdict through calls. Only a
// failed round trip (no reply within lateFactor × Timeout, or a broken
// connection) is a failure, carried by one call, the others' verdicts
// excluding them (sharedFailure). A reply that came, however late, is
// Redis answering: it decides, and counts as slow (the batcher then halves
// the pipelines in flight) but never towards the breaker, because on a
// busy host this process's own scheduling delays reading replies that
// came in time by several Timeouts, and an open breaker would hand every
// decision to the failure policy with Redis healthy. A failure counts only
// when sent after the last counted failure was seen (round trips that
// fail together fail for one cause), and not at all when noticed more than
// a Timeout after its deadline: the deadline fired late, so this process
// was stalled (CPU starved, a long GC), which says nothing about Redis.
func (s *Store) judge(ln *lane, calls []*call, start time.Time, rtt time.Duration, failed bool) {
	s.stats.roundTrip(failed, rtt > s.cfg.Timeout)
	if !failed {
		return
	}
	stalled := rtt > (lateFactor+1)*s.cfg.Timeout
	counted := !stalled && ln.countFailure(int64(start.Sub(s.epoch)), int64(time.Since(s.epoch)))
	for _, c := range calls {
		var sf *sharedFailure
		if errors.As(c.verdict, &sf) && counted {
			c.verdict, counted = c.err, false
		}
	}
}

// runPipeline sends batch as one pipeline of EVALSHAs, then resends as EVAL
// those that met NOSCRIPT (a restarted or flushed Redis), all within
// lateFactor × Timeout from now, and gives the breaker its verdict (see
// judge). It reports the round trip's duration and whether it failed as
// a whole (a timeout or a broken connection).
func (s *Store) runPipeline(ln *lane, batch []*call) (time.Duration, bool) {
	start, rtt, failed := s.sendPipeline(batch, lateFactor*s.cfg.Timeout)
	s.judge(ln, batch, start, rtt, failed)
	return rtt, failed
}

// sendPipeline sends batch as runPipeline does, within limit, and reports
// when it began, how long it took and whether it failed as a whole.
func (s *Store) sendPipeline(batch []*call, limit time.Duration) (time.Time, time.Duration, bool) {
	start := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(limit))
	defer cancel()
	cmds, failed := s.execPipeline(ctx, batch, false)
	var retry []*call
	for i, c := range batch {
		if err := cmds[i].Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			retry = append(retry, c)
		}
	}
	if len(retry) > 0 {
		_, failed = s.execPipeline(ctx, retry, true)
	}
	return start, time.Since(start), failed
}

func (s *Store) execPipeline(ctx context.Context, calls []*call, eval bool) ([]*redis.Cmd, bool) {
	pipe := s.client.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		if eval {
			cmds[i] = c.script.Eval(ctx, pipe, c.keys, c.args...)
		} else {
			cmds[i] = c.script.EvalSha(ctx, pipe, c.keys, c.args...)
		}
	}
	_, _ = pipe.Exec(ctx) // errors are per command
	failed := false
	for i, c := range calls {
		v, err := cmds[i].Result()
		switch {
		case err == nil:
			c.v, c.err = v, nil
		case !eval && redis.HasErrorPrefix(err, "NOSCRIPT"):
			continue
		case isRedisError(err):
			c.err = fmt.Errorf("redisstore: eval: %w", err)
		default:
			// The round trip failed for the whole pipeline (timeout,
			// connection).
			failed = true
			c.err = fmt.Errorf("redisstore: eval: %w", err)
			c.verdict = &sharedFailure{err: c.err}
			continue
		}
		c.verdict = c.err
	}
	return cmds, failed
}

// sharedFailure is the failure of a round trip that the
// breaker does not count: it failed with others, for a cause counted once
// already, or while this process was stalled (see judge).
type sharedFailure struct{ err error }

func (e *sharedFailure) Error() string { return e.err.Error() }
func (e *sharedFailure) Unwrap() error { return e.err }

// localShare is one instance's share of l under the Local policy: rate and
// burst divided by n (a window's burst per window, its end kept), but the
// burst never below the cost when l's own burst admits it, so a request
// the shared bucket could admit is never refused forever by every
// instance.
func localShare(l ratelimit.Limit, cost float64, n int) ratelimit.Limit {
	if n <= 1 {
		return l
	}
	share := l
	share.Rate, share.Burst = l.Rate/float64(n), l.Burst/float64(n)
	if share.Burst < cost && cost <= l.Burst {
		share.Burst = cost
	}
	return share
}

func (s *Store) policyApplied(p FailurePolicy, cause error, now time.Time) {
	s.stats.policy.Add(1)
	overload := errors.Is(cause, ErrOverloaded)
	if overload {
		s.stats.overloaded.Add(1)
	}
	if s.opts.OnPolicy != nil {
		s.opts.OnPolicy(p, cause)
	}
	if s.opts.Logger == nil {
		return
	}
	if !overload {
		if n, ok := s.logs.allow(now.UnixNano()); ok {
			s.opts.Logger.Warn("redisstore: Redis unavailable, failure policy applied",
				"policy", p.String(), "cause", cause.Error(), "decisions", n, "breaker", s.BreakerState().String())
		}
		return
	}
	if n, ok := s.overload.allow(now.UnixNano()); ok {
		// Backpressure, not Redis trouble: more decisions than this
		// instance's pipelines carry within queue_timeout.
		s.opts.Logger.Warn("redisstore: rate layer overloaded: decisions waited past queue_timeout in this instance's queue, failure policy applied",
			"policy", p.String(), "decisions", n, "queue_timeout", s.cfg.QueueTimeout.String(),
			"max_in_flight", s.cfg.Batch.MaxInFlight, "max_batch", s.cfg.Batch.MaxBatch)
	}
}

// Close makes later decisions fail with ErrClosed. Decisions in flight end
// within their deadline. In sync mode it stops the reconciliation loop
// (what was taken since the last reconciliation is not pushed). It leaves
// the fleet's membership. The Store does not close the client, which the
// caller owns.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.syncer.close()
	s.members.close()
	return nil
}

// Instances returns the number of gateway instances sharing the Redis, as
// this instance counts them: Config.Instances when set, and otherwise the
// live count of the fleet's membership (see members). Shares and caps
// divide by it.
func (s *Store) Instances() int { return s.members.count() }

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

// isRedisError reports whether err is (or wraps) an error reply from
// Redis. It allocates nothing for a nil err.
func isRedisError(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	return errors.As(err, &re)
}

// isScriptError reports whether err is an error reply Redis gave about the
// script or its arguments, rather than about its own health (loading,
// busy, read-only replica, cluster down, out of memory, failing over).
func isScriptError(err error) bool {
	if err == nil {
		return false
	}
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
