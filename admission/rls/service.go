package rls

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// Outcomes of one descriptor, the outcome label of
// fairgate_rls_decisions_total.
const (
	OutcomeAdmit        = "admit"         // limited, and within its limit
	OutcomeReject       = "reject"        // OVER_LIMIT
	OutcomeShadowReject = "shadow_reject" // would have been OVER_LIMIT; answered OK (shadow mode)
	OutcomeUnlimited    = "unlimited"     // rate_limit: {unlimited: true}, or replaced by another limit
	OutcomeNoLimit      = "no_limit"      // no configured limit (or unknown domain)
	OutcomeNotCharged   = "not_charged"   // limited, but not asked: another descriptor's limit of zero refused the request
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
	tel     *Telemetry
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
	s := &Service{store: o.Store, shadow: cfg.Shadow, headers: *cfg.ResponseHeaders, tel: o.Telemetry.orNop(o.Logger)}
	s.rules.Store(rules)
	return s, nil
}

// SetRules puts rules in force for the calls that start from now on.
func (s *Service) SetRules(r *Rules) { s.rules.Store(r) }

// Rules returns the rules in force.
func (s *Service) Rules() *Rules { return s.rules.Load() }

// verdict is one descriptor's decision.
type verdict struct {
	node    *node
	rule    *rule // nil: not limited
	cost    float64
	res     ratelimit.Result
	over    bool // over the limit, before shadow mode
	shadow  bool
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
	if err := validate(req); err != nil {
		return nil, nil, nil, err
	}
	vs := make([]verdict, len(req.Descriptors))
	// Match every descriptor first: replaces needs the whole request.
	var replaced map[string]bool
	for i, d := range req.Descriptors {
		v := &vs[i]
		v.cost = cost(req, d)
		v.outcome = OutcomeNoLimit
		if tree == nil {
			continue
		}
		v.node = tree.match(d.Entries)
		if v.node != nil {
			v.rule = v.node.limit
			v.shadow = v.node.shadow
		}
		if o := d.GetLimit(); o != nil {
			v.rule = overrideRule(o, v.node)
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
	// Classify, then charge every limited descriptor's bucket at once.
	var pending []int // verdicts whose buckets the store is asked for
	blocked := false  // an enforced limit of zero refuses the request
	for i := range vs {
		v := &vs[i]
		switch {
		case v.rule == nil:
		case v.rule.unlimited, v.rule.configuredName != "" && replaced[v.rule.configuredName]:
			v.outcome = OutcomeUnlimited
		case v.rule.requestsPerUnit == 0:
			// A limit of zero refuses everything; no bucket to ask.
			v.res = ratelimit.Result{RetryAfter: v.rule.window, ResetAfter: v.rule.window}
			v.over = true
			blocked = blocked || !s.shadowed(v)
		default:
			pending = append(pending, i)
		}
	}
	if blocked {
		// Charging the others would charge a refused request.
		for _, i := range pending {
			vs[i].outcome = OutcomeNotCharged
		}
	} else if len(pending) > 0 { // so tree is not nil
		if err := s.charge(ctx, req, tree.tag, vs, pending); err != nil {
			return nil, nil, nil, err
		}
	}
	var decider *verdict
	for i := range vs {
		v := &vs[i]
		if v.rule == nil || v.outcome == OutcomeUnlimited || v.outcome == OutcomeNotCharged {
			continue
		}
		v.outcome = OutcomeAdmit
		if v.over {
			v.outcome = OutcomeReject
			if s.shadowed(v) {
				v.outcome = OutcomeShadowReject
			}
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
	case OutcomeShadowReject:
		return 1
	}
	return 0
}

// cost is the tokens descriptor d takes: its own hits_addend when set,
// else the request's; zero means one.
func cost(req *rlsv3.RateLimitRequest, d *ratelimitDescriptor) float64 {
	if h := d.GetHitsAddend(); h != nil {
		if h.Value == 0 {
			return 1
		}
		return float64(h.Value)
	}
	if req.HitsAddend == 0 {
		return 1
	}
	return float64(req.HitsAddend)
}

// match walks the tree with a request descriptor's entries and returns the
// node the last entry reached, or nil when the descriptor leaves the tree.
func (lvl *level) match(entries []*ratelimitEntry) *node {
	var n *node
	for _, e := range entries {
		if n != nil {
			lvl = &n.children
		}
		n = lvl.child(e.Key, e.Value)
		if n == nil {
			return nil
		}
	}
	return n
}

// overrideUnits maps the request-level limit override's units to ours.
var overrideUnits = map[typev3.RateLimitUnit]Unit{
	typev3.RateLimitUnit_SECOND: UnitSecond, typev3.RateLimitUnit_MINUTE: UnitMinute,
	typev3.RateLimitUnit_HOUR: UnitHour, typev3.RateLimitUnit_DAY: UnitDay,
	typev3.RateLimitUnit_MONTH: UnitMonth, typev3.RateLimitUnit_YEAR: UnitYear,
}

// overrideRule is the rule of a request-level limit override (validated).
// It keeps the matched node's name, so metrics and headers still name the
// configured descriptor.
func overrideRule(o *ratelimitOverride, n *node) *rule {
	u := overrideUnits[o.Unit]
	window := u.Duration()
	if m := o.GetUnitMultiplier(); m != nil {
		window *= time.Duration(m.Value)
	}
	name := "override"
	if n != nil {
		name = n.path
		if n.limit != nil {
			name = n.limit.name
		}
	}
	r := newRule(name, o.RequestsPerUnit, u, window)
	if m := o.GetUnitMultiplier(); m != nil && m.Value > 1 {
		r.unitMultiplier = m.Value
	}
	return r
}

// response builds the answer from the verdicts.
func (s *Service) response(vs []verdict, decider *verdict) *rlsv3.RateLimitResponse {
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(vs))}
	var retry time.Duration
	for i := range vs {
		v := &vs[i]
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		resp.Statuses[i] = st
		if v.outcome != OutcomeAdmit && v.outcome != OutcomeReject && v.outcome != OutcomeShadowReject {
			continue
		}
		// A store that did not read the bucket knows no remaining tokens,
		// and Envoy's x-ratelimit headers are made from current_limit
		// and limit_remaining: neither is sent. A remembered denial
		// still knows when it ends.
		if !v.res.StateUnknown {
			st.CurrentLimit = v.rule.current()
			st.LimitRemaining = uint32(min(math.Floor(v.res.Remaining), math.MaxUint32))
		}
		if !v.res.StateUnknown || v.over {
			st.DurationUntilReset = durationpb.New(untilReset(v))
		}
		if v.outcome == OutcomeReject {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
			retry = max(retry, v.res.RetryAfter)
		}
	}
	if s.headers && decider != nil {
		resp.ResponseHeadersToAdd = headers(vs, decider, resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT, retry)
	}
	return resp
}

// untilReset is a descriptor's duration_until_reset: when over, the time
// until its bucket holds the request's cost again (what Retry-After says);
// else the time until the bucket is full.
func untilReset(v *verdict) time.Duration {
	if v.over {
		return v.res.RetryAfter
	}
	return v.res.ResetAfter
}

// current is the rule as Envoy's current_limit.
func (r *rule) current() *rlsv3.RateLimitResponse_RateLimit {
	c := &rlsv3.RateLimitResponse_RateLimit{Name: r.name, RequestsPerUnit: r.requestsPerUnit, Unit: responseUnits[r.unit]}
	if r.unitMultiplier > 1 {
		c.UnitMultiplier = wrapUint32(r.unitMultiplier)
	}
	return c
}

var responseUnits = [...]rlsv3.RateLimitResponse_RateLimit_Unit{
	UnitNone: rlsv3.RateLimitResponse_RateLimit_UNKNOWN, UnitSecond: rlsv3.RateLimitResponse_RateLimit_SECOND,
	UnitMinute: rlsv3.RateLimitResponse_RateLimit_MINUTE, UnitHour: rlsv3.RateLimitResponse_RateLimit_HOUR,
	UnitDay: rlsv3.RateLimitResponse_RateLimit_DAY, UnitWeek: rlsv3.RateLimitResponse_RateLimit_WEEK,
	UnitMonth: rlsv3.RateLimitResponse_RateLimit_MONTH, UnitYear: rlsv3.RateLimitResponse_RateLimit_YEAR,
}

// headers renders the client-facing headers: RateLimit-Policy lists every
// limit that applied; RateLimit and RateLimit-Limit/-Remaining/-Reset
// describe the one that decided (a rejection, else the fewest tokens
// left), in its real state even under shadow mode, and are left out when
// the store did not read its bucket (nothing is known to tell); Retry-After,
// in whole seconds (at least 1), when the answer is OVER_LIMIT.
func headers(vs []verdict, decider *verdict, over bool, retry time.Duration) []*corev3.HeaderValue {
	// All values are written into one buffer, made one string and sliced,
	// and the header values are one array: four allocations, not twenty.
	var arr [256]byte
	b := arr[:0]
	var keys [len(headerKeys)]string
	var ends [len(headerKeys)]int
	n := 0
	mark := func(key string) {
		keys[n], ends[n] = key, len(b)
		n++
	}
	for i := range vs {
		v := &vs[i]
		if v.outcome != OutcomeAdmit && v.outcome != OutcomeReject && v.outcome != OutcomeShadowReject {
			continue
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		q := quota(v)
		b = ratelimit.AppendPolicy(b, &q)
	}
	mark(headerKeys[0])
	if !decider.res.StateUnknown {
		q := quota(decider)
		b = ratelimit.AppendState(b, &q)
		mark(headerKeys[1])
		b = strconv.AppendUint(b, uint64(decider.rule.requestsPerUnit), 10)
		mark(headerKeys[2])
		b = strconv.AppendInt(b, int64(q.Remaining), 10)
		mark(headerKeys[3])
		b = strconv.AppendInt(b, ceilSeconds(q.Reset, 0), 10)
		mark(headerKeys[4])
	}
	if over {
		b = strconv.AppendInt(b, ceilSeconds(retry, 1), 10)
		mark(headerKeys[5])
	}
	all := string(b)
	hv := make([]corev3.HeaderValue, n)
	out := make([]*corev3.HeaderValue, n)
	start := 0
	for i := range n {
		hv[i].Key, hv[i].Value = keys[i], all[start:ends[i]]
		out[i] = &hv[i]
		start = ends[i]
	}
	return out
}

// headerKeys are the response headers, in the order headers writes them;
// Retry-After, last, only when over the limit.
var headerKeys = [...]string{"RateLimit-Policy", "RateLimit", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "Retry-After"}

func quota(v *verdict) ratelimit.QuotaState {
	return ratelimit.QuotaState{Name: v.rule.name, Limit: float64(v.rule.requestsPerUnit), Window: v.rule.window,
		Remaining: math.Floor(v.res.Remaining), Reset: untilReset(v)}
}

// ceilSeconds is d in whole seconds, rounded up, at least least.
func ceilSeconds(d time.Duration, least int64) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, least)
}

// The generated types of the request's descriptors, by shorter names.
type (
	ratelimitDescriptor = commonrl.RateLimitDescriptor
	ratelimitEntry      = commonrl.RateLimitDescriptor_Entry
	ratelimitOverride   = commonrl.RateLimitDescriptor_RateLimitOverride
)

func wrapUint32(v uint32) *wrapperspb.UInt32Value { return wrapperspb.UInt32(v) }
