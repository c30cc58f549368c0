package rls

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// Outcomes of one descriptor, the outcome label of
// fairgate_rls_decisions_total.
const (
	OutcomeAdmit        = "admit"         // limited, and within its limit
	OutcomeReject       = "reject"        // OVER_LIMIT
	OutcomeShadowReject = "shadow_reject" // over the limit in shadow mode: the request is answered OK
	OutcomeQuotaOver    = "quota_over"    // a quota_mode descriptor over its limit, in a request its quotas did not refuse
	OutcomeUnlimited    = "unlimited"     // rate_limit: {unlimited: true}, or replaced by another limit
	OutcomeNoLimit      = "no_limit"      // no configured limit (or unknown domain)
	OutcomeNotCharged   = "not_charged"   // limited, but not asked: a limit of zero or a check refused the request
	OutcomeSettled      = "settled"       // a settlement (SettleKey): what the request used less its reserve, charged or refunded
)

// Service implements envoy.service.ratelimit.v3.RateLimitService. Build it
// with NewService; it is safe for concurrent use, and SetRules swaps the
// rules under running calls.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	store   ratelimit.Store
	rules   atomic.Pointer[Rules]
	shadow  bool
	headers bool
	near    float64 // rls.near_limit_ratio
	window  Window  // rls.window
	limits  Limits
	tel     *Telemetry
	now     func() time.Time // cuts the fixed windows
	// settleNonce and settleSeq name settlements (settleID).
	settleNonce string
	settleSeq   atomic.Uint64
}

// Options are a Service's collaborators. The zero value works: an
// embedded store, no logs, no traces, no metrics.
type Options struct {
	// Store decides. Nil means a new embedded MemoryStore.
	Store ratelimit.Store
	// Logger receives the service's logs (reloads, store faults, shadow
	// rejections at most once per LogEvery per descriptor). Nil discards.
	Logger *slog.Logger
	// Telemetry records one admission.rls span per call and the
	// decision metrics. Nil records nothing.
	Telemetry *Telemetry
	// Now is the clock that cuts fixed windows (WindowFixed): a call's
	// instant chooses its window, whose end the store then counts to.
	// The store's own clock must agree with it, as the embedded store's
	// does when both read the host's. Nil means time.Now.
	Now func() time.Time
}

var _ rlsv3.RateLimitServiceServer = (*Service)(nil)

// NewService returns a Service deciding rules under cfg's settings.
func NewService(cfg Config, rules *Rules, o Options) (*Service, error) {
	if rules == nil {
		return nil, errors.New("rls: nil rules")
	}
	cfg = cfg.withDefaults()
	if o.Store == nil {
		o.Store = ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{})
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	var nonce [8]byte
	rand.Read(nonce[:])
	s := &Service{store: o.Store, shadow: cfg.Shadow, headers: cfg.ResponseHeaders, near: cfg.NearLimitRatio,
		window: cfg.Window, limits: cfg.Limits, tel: o.Telemetry.orNop(o.Logger), now: o.Now,
		settleNonce: "rls:" + hex.EncodeToString(nonce[:]) + ":"}
	s.rules.Store(rules)
	return s, nil
}

// SetRules puts rules in force for the calls that start from now on.
func (s *Service) SetRules(r *Rules) { s.rules.Store(r) }

// Rules returns the rules in force.
func (s *Service) Rules() *Rules { return s.rules.Load() }

// verdict is one descriptor's decision.
type verdict struct {
	node  *node
	rule  *rule           // nil: not limited
	limit ratelimit.Limit // the rule's, for this call (Service.limitAt)
	cost  float64         // zero: a check (hits_addend 0), never charged; signed for a settlement
	// settle marks a settlement: its descriptor's last entry is SettleKey,
	// which its match and bucket leave out (entries).
	settle bool
	res    ratelimit.Result
	over   bool // over the limit, before shadow mode
	// shadow is the descriptor's own shadow_mode (rls.shadow is the
	// Service's; shadowed is either).
	shadow  bool
	near    bool // admitted, and near the limit (rls.near_limit_ratio)
	outcome string
}

// ShouldRateLimit decides a request: each descriptor on its own bucket,
// the buckets charged all or nothing (see charge), OVER_LIMIT overall if
// any descriptor not in shadow mode is over. A
// malformed request is InvalidArgument; a store that cannot decide (the
// Redis store under fail_closed) is Unavailable, so Envoy's
// failure_mode_deny decides what the client sees.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	tree := s.rules.Load().domains[req.GetDomain()]
	c := s.tel.start(ctx, req.GetDomain(), tree != nil)
	resp, decider, vs, err := s.decide(ctx, req, tree)
	for i := range vs {
		c.verdict(&vs[i])
	}
	c.end(resp, decider, vs, err)
	return resp, err
}

func (s *Service) decide(ctx context.Context, req *rlsv3.RateLimitRequest, tree *level) (*rlsv3.RateLimitResponse, *verdict, []verdict, error) {
	if err := validate(req, s.limits); err != nil {
		return nil, nil, nil, err
	}
	vs := make([]verdict, len(req.Descriptors))
	// Match every descriptor first: replaces needs the whole request.
	var replaced map[string]bool
	for i, d := range req.Descriptors {
		v := &vs[i]
		v.cost = cost(req, d)
		v.outcome = OutcomeNoLimit
		if reserve, ok := settlement(d); ok {
			v.settle, v.cost = true, v.cost-reserve
		}
		if tree == nil {
			continue
		}
		v.node = tree.match(matchEntries(req, vs, i))
		if v.node != nil {
			v.rule = v.node.limit
			v.shadow = v.node.shadow
		}
		if o := d.GetLimit(); o != nil {
			// Envoy's override is enforced, whatever the matched
			// descriptor's shadow_mode (rls.shadow still applies).
			v.rule, v.shadow = overrideRule(o, v.node), false
		}
		if v.rule != nil {
			for _, n := range v.rule.replaces {
				if replaced == nil {
					replaced = make(map[string]bool)
				}
				replaced[n] = true
			}
		}
	}
	// Classify; read the checks; then charge every other limited
	// descriptor's bucket at once.
	var pending, checks, settles []int // verdicts whose buckets the store is asked to charge, only read, or settle
	var now time.Time                  // read when a fixed window needs it (limitAt)
	for i := range vs {
		v := &vs[i]
		switch {
		case v.rule == nil:
			continue
		case v.rule.unlimited, v.rule.configuredName != "" && replaced[v.rule.configuredName]:
			v.outcome = OutcomeUnlimited
			continue
		}
		v.limit = s.limitAt(v.rule, &now)
		if v.settle {
			// A limit of zero has no bucket, and a cost of zero (used
			// what it reserved) nothing to settle.
			if v.rule.requestsPerUnit > 0 && v.cost != 0 {
				settles = append(settles, i)
			}
			v.outcome = OutcomeSettled
			continue
		}
		switch {
		case v.rule.requestsPerUnit == 0:
			// A limit of zero refuses everything; no bucket to ask. The
			// wait is one unit (a bucket's refill), or in a fixed window
			// the time to its end, as envoyproxy/ratelimit tells it.
			wait := v.rule.window
			if v.limit.Fixed() {
				wait = untilEnd(v.limit, now)
			}
			v.res = ratelimit.Result{RetryAfter: wait, ResetAfter: wait}
			v.over = true
		case v.cost == 0:
			checks = append(checks, i)
		default:
			pending = append(pending, i)
		}
	}
	if len(checks) > 0 { // so tree is not nil
		s.check(req, tree.tag, vs, checks, now)
	}
	// A refusal known before any charge (an enforced limit of zero or
	// check over, or every quota over among them) charges nothing, as
	// enforcement would (rls.shadow too).
	if s.refused(vs, true) {
		// Charging the others would charge a refused request.
		for _, i := range pending {
			vs[i].outcome = OutcomeNotCharged
		}
	} else if len(pending) > 0 { // so tree is not nil
		if err := s.charge(ctx, req, tree.tag, vs, pending); err != nil {
			return nil, nil, nil, err
		}
	}
	if len(settles) > 0 {
		if err := s.settleAll(ctx, req, tree.tag, vs, settles); err != nil {
			return nil, nil, nil, err
		}
	}
	var decider *verdict
	refused := s.refused(vs, false)
	for i := range vs {
		v := &vs[i]
		if v.rule == nil || v.outcome == OutcomeUnlimited || v.outcome == OutcomeNotCharged || v.settle {
			continue
		}
		v.outcome = OutcomeAdmit
		if v.over {
			switch {
			case s.shadowed(v):
				v.outcome = OutcomeShadowReject
			case v.rule.quotaMode && !refused:
				v.outcome = OutcomeQuotaOver
			default:
				v.outcome = OutcomeReject
			}
		} else {
			v.near = s.nearLimit(v)
		}
		if decider == nil || rank(v) > rank(decider) || rank(v) == rank(decider) && fewer(v, decider) {
			decider = v
		}
	}
	return s.response(vs, decider), decider, vs, nil
}

// fewer reports whether v has fewer tokens left than w, among verdicts of
// one rank: a known state is fewer than an unknown one (a store that did
// not read the bucket), which tells nothing.
func fewer(v, w *verdict) bool {
	if v.res.StateUnknown || w.res.StateUnknown {
		return !v.res.StateUnknown
	}
	return v.res.Remaining < w.res.Remaining
}

// rank orders verdicts for choosing the one that decided the call: a
// rejection first, then a shadow rejection, then the tightest admit.
func rank(v *verdict) int {
	switch v.outcome {
	case OutcomeReject:
		return 2
	case OutcomeShadowReject, OutcomeQuotaOver:
		return 1
	}
	return 0
}

// cost is the tokens descriptor d takes: its own hits_addend when set
// (zero: a check, which takes nothing), else the request's (zero means
// one), as envoyproxy/ratelimit counts hits.
func cost(req *rlsv3.RateLimitRequest, d *ratelimitDescriptor) float64 {
	if h := d.GetHitsAddend(); h != nil {
		return float64(h.Value)
	}
	if req.HitsAddend == 0 {
		return 1
	}
	return float64(req.HitsAddend)
}

// nearLimit reports whether v, admitted, leaves its bucket near the
// limit: the tokens used exceed ⌊rls.near_limit_ratio × requests_per_unit⌋,
// envoyproxy/ratelimit's near-limit threshold. A check takes nothing, and
// a bucket the store did not read tells nothing: neither is near.
func (s *Service) nearLimit(v *verdict) bool {
	if v.cost == 0 || v.res.StateUnknown {
		return false
	}
	rpu := float64(v.rule.requestsPerUnit)
	return rpu-v.res.Remaining > math.Floor(rpu*s.near)
}

// match walks the tree with a request descriptor's entries and returns the
// node the last entry reached, or nil when the descriptor leaves the tree.
func (lvl *level) match(entries []*ratelimitEntry) *node {
	var n *node
	for _, e := range entries {
		if n != nil {
			lvl = &n.children
		}
		n = lvl.child(e.GetKey(), e.GetValue())
		if n == nil {
			return nil
		}
	}
	return n
}

// The generated types of the request's descriptors, by shorter names.
type (
	ratelimitDescriptor = commonrl.RateLimitDescriptor
	ratelimitEntry      = commonrl.RateLimitDescriptor_Entry
	ratelimitOverride   = commonrl.RateLimitDescriptor_RateLimitOverride
)

func wrapUint32(v uint32) *wrapperspb.UInt32Value { return wrapperspb.UInt32(v) }
