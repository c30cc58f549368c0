package admission

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// SettleConfig is a route's usage-based cost: the reserve is taken at
// admission like a fixed cost, and once the upstream has answered, what
// the request used (the upstream's field Name) is settled: the difference
// charged or refunded in one store call, exactly once.
//
//	settle: {from: header, name: X-Usage-Tokens, reserve: 200, max: 20000}
type SettleConfig struct {
	// From is where the usage comes: "header" (a response header) or
	// "trailer" (a trailer at the end of a streamed body, as SSE and
	// chunked LLM answers end).
	From string `yaml:"from"`
	// Name is the field's name.
	Name string `yaml:"name"`
	// Reserve is what admission takes, in tokens (at least 1, at most
	// every bucket's burst): what a response without the field is
	// charged.
	Reserve float64 `yaml:"reserve"`
	// Max bounds what one request is charged, in tokens; at least
	// Reserve. Zero means Reserve × 100.
	Max float64 `yaml:"max"`
	// Learn makes the reserve a tenant's own: what its requests of the
	// route used lately (a mean weighted to the last ten or so that
	// reported their usage), never less than Reserve nor more than Max or
	// a bucket's burst. A tenant of large completions then reserves what
	// it uses, so its requests in flight cannot run far past its quota
	// before they settle; a tenant of small ones still reserves Reserve.
	Learn bool `yaml:"learn"`
}

// StatusRange is a range of HTTP statuses, Lo to Hi: 401 or "500-599" in a
// file.
type StatusRange struct{ Lo, Hi int }

// UnmarshalYAML reads a status (401) or a range ("500-599").
func (s *StatusRange) UnmarshalYAML(n *yaml.Node) error {
	lo, hi, ok := strings.Cut(n.Value, "-")
	a, err1 := strconv.Atoi(strings.TrimSpace(lo))
	b, err2 := a, error(nil)
	if ok {
		b, err2 = strconv.Atoi(strings.TrimSpace(hi))
	}
	if n.Kind != yaml.ScalarNode || err1 != nil || err2 != nil || a < 100 || b > 599 || a > b {
		return fmt.Errorf("line %d: %q is not a status (401) or a range of statuses (500-599)", n.Line, n.Value)
	}
	*s = StatusRange{a, b}
	return nil
}

// settlement is a route's compiled settle and charge_on_status.
type settlement struct {
	// field is the canonical name of the usage field; "" when only
	// charge_on_status settles (the reserve, or nothing).
	field   string
	trailer bool
	reserve float64
	max     float64
	// on are the statuses that are charged; nil: every one.
	on []StatusRange
	// warned is when (Unix ns) an answer without the usage was last
	// logged: at most once per DefaultShadowLogEvery, as shadow mode's.
	warned atomic.Int64
	// learn is settle.learn; learned maps a tenant's ID to the mean of
	// what its requests used (*atomic.Uint64, a float64's bits). The
	// tenants are the configured ones, so it is bounded; it lives as
	// long as the compiled config.
	learn   bool
	learned sync.Map
}

// learnWeight is the weight of a request's usage in its tenant's mean:
// about the last ten count.
const learnWeight = 0.1

// reserveFor is what a request of tenant reserves: the mean of what its
// requests used, within reserve and max (reserve before any).
func (st *settlement) reserveFor(tenant string) float64 {
	if v, ok := st.learned.Load(tenant); ok {
		return min(max(math.Float64frombits(v.(*atomic.Uint64).Load()), st.reserve), st.max)
	}
	return st.reserve
}

// observe counts used, what a request of tenant reported, in its mean.
func (st *settlement) observe(tenant string, used float64) {
	v, ok := st.learned.Load(tenant)
	if !ok {
		u := new(atomic.Uint64)
		u.Store(math.Float64bits(used))
		if v, ok = st.learned.LoadOrStore(tenant, u); !ok {
			return
		}
	}
	u := v.(*atomic.Uint64)
	for {
		old := u.Load()
		mean := math.Float64frombits(old)
		if u.CompareAndSwap(old, math.Float64bits(mean+learnWeight*(used-mean))) {
			return
		}
	}
}

// warnDue reports whether an answer without usage at now is logged.
func (st *settlement) warnDue(now time.Time) bool {
	last := st.warned.Load()
	return now.UnixNano()-last >= int64(DefaultShadowLogEvery) && st.warned.CompareAndSwap(last, now.UnixNano())
}

// compileSettle compiles rc's settle and charge_on_status (f is the
// route's path in the file), and returns the cost admission takes.
func compileSettle(f string, rc RouteConfig) (*settlement, float64, error) {
	if rc.Settle == nil && rc.ChargeOnStatus == nil {
		return nil, rc.Cost, nil
	}
	if rc.Auth == AuthNone {
		return nil, 0, fmt.Errorf("%s: a route with auth: none charges no tenant, so it settles nothing: delete settle and charge_on_status", f)
	}
	st := &settlement{on: rc.ChargeOnStatus, reserve: rc.Cost, learn: rc.Settle != nil && rc.Settle.Learn}
	if rc.ChargeOnStatus != nil && len(rc.ChargeOnStatus) == 0 {
		return nil, 0, fmt.Errorf("%s.charge_on_status: empty: list the statuses that are charged (401, 500-599), or delete it", f)
	}
	if st.reserve == 0 {
		st.reserve = 1
	}
	st.max = st.reserve
	if s := rc.Settle; s != nil {
		switch s.From {
		case "header":
		case "trailer":
			st.trailer = true
		default:
			return nil, 0, fmt.Errorf("%s.settle.from: must be header or trailer, got %q", f, s.From)
		}
		if s.Name == "" || strings.ContainsAny(s.Name, " :\t\r\n") {
			return nil, 0, fmt.Errorf("%s.settle.name: must be a header field's name (X-Usage-Tokens), got %q", f, s.Name)
		}
		if rc.Cost != 0 {
			return nil, 0, fmt.Errorf("%s.cost: a settled route takes settle.reserve at admission: delete cost", f)
		}
		if !(s.Reserve >= 1) || s.Reserve > 1e9 {
			return nil, 0, fmt.Errorf("%s.settle.reserve: must be >= 1 and at most 1e9 (tokens), got %v", f, s.Reserve)
		}
		st.field, st.reserve, st.max = http.CanonicalHeaderKey(s.Name), s.Reserve, s.Max
		if st.max == 0 {
			st.max = s.Reserve * 100
		}
		if !(st.max >= st.reserve) || st.max > 1e12 {
			return nil, 0, fmt.Errorf("%s.settle.max: must be at least settle.reserve (%v) and at most 1e12, got %v", f, s.Reserve, s.Max)
		}
	}
	return st, st.reserve, nil
}

// charged returns what a request of st's route that reserved reserve and
// that the upstream answered with status used, its usage field v (absent:
// ""); reported is false when the route settles from a field and the
// answer had none that parses (it is then charged its reserve). A status of 0, unknown (an embedder's
// Answered), is charged as one that matches charge_on_status: a refund is
// for an outcome known not to be charged, never for one not known.
func (st *settlement) charged(reserve float64, status int, v string) (used float64, reported bool) {
	if st.on != nil && status != 0 && !st.matches(status) {
		return 0, true
	}
	if st.field == "" {
		return reserve, true
	}
	u, ok := parseUsage(v)
	if !ok {
		return reserve, false
	}
	return min(u, st.max), true
}

// parseUsage reads a usage field: a decimal number, not negative (12,
// 0.5, 1e6), with spaces around it. Go's other float syntaxes (Inf, NaN,
// hexadecimal, underscores) are no usage an upstream reports, so they are
// unreported; a number too large for a float64 is +Inf, which max bounds,
// as any large one.
func parseUsage(v string) (float64, bool) {
	v = strings.TrimSpace(v)
	digits := false
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c >= '0' && c <= '9':
			digits = true
		case c == '.' || ((c == 'e' || c == 'E') && digits) || ((c == '+' || c == '-') && i > 0 && (v[i-1] == 'e' || v[i-1] == 'E')):
		default:
			return 0, false
		}
	}
	u, err := strconv.ParseFloat(v, 64)
	if !digits || (err != nil && !errors.Is(err, strconv.ErrRange)) || !(u >= 0) {
		return 0, false
	}
	return u, true
}

func (st *settlement) matches(status int) bool {
	for _, r := range st.on {
		if status >= r.Lo && status <= r.Hi {
			return true
		}
	}
	return false
}

// grpcOutcome returns the status a charge_on_status route is charged by
// for an answer of status whose header (trailers among it, after the
// body) is h: a gRPC answer's outcome is its grpc-status (a trailer, or in
// the head of a trailers-only answer), under HTTP 200; it counts as the
// HTTP status gRPC's own mapping gives it (grpc-gateway's, as Envoy's
// grpc_json_transcoder: NOT_FOUND 404, UNAUTHENTICATED 401), and as 0,
// unknown, when the stream ended without one. Any other answer is status.
func grpcOutcome(h http.Header, status int) int {
	if status != http.StatusOK || !strings.HasPrefix(h.Get("Content-Type"), "application/grpc") {
		return status
	}
	code, err := strconv.Atoi(usageOf(h, "Grpc-Status", true))
	if err != nil || code < 0 || code >= len(grpcHTTPStatus) {
		return 0
	}
	return grpcHTTPStatus[code]
}

// grpcHTTPStatus maps gRPC's status codes (OK 0 to UNAUTHENTICATED 16) to
// HTTP statuses.
var grpcHTTPStatus = [...]int{
	http.StatusOK,                  // OK
	499,                            // CANCELLED: the client closed the request
	http.StatusInternalServerError, // UNKNOWN
	http.StatusBadRequest,          // INVALID_ARGUMENT
	http.StatusGatewayTimeout,      // DEADLINE_EXCEEDED
	http.StatusNotFound,            // NOT_FOUND
	http.StatusConflict,            // ALREADY_EXISTS
	http.StatusForbidden,           // PERMISSION_DENIED
	http.StatusTooManyRequests,     // RESOURCE_EXHAUSTED
	http.StatusBadRequest,          // FAILED_PRECONDITION
	http.StatusConflict,            // ABORTED
	http.StatusBadRequest,          // OUT_OF_RANGE
	http.StatusNotImplemented,      // UNIMPLEMENTED
	http.StatusInternalServerError, // INTERNAL
	http.StatusServiceUnavailable,  // UNAVAILABLE
	http.StatusInternalServerError, // DATA_LOSS
	http.StatusUnauthorized,        // UNAUTHENTICATED
}

// pendingSettle is what a lease keeps to settle its request: the buckets
// admission charged the reserve to, the upstream's status and usage.
type pendingSettle struct {
	st     *settlement
	takes  *[MaxQuotas]ratelimit.Take // allocated for a settled request only
	n      int
	status int
	usage  string
	// reserved is what admission took: the route's reserve, or the
	// tenant's learned one.
	reserved float64
	// global is the backstop the reserve was also taken from (nil:
	// none); tenant is whose request it is.
	global *ratelimit.BackstopLimit
	tenant string
}

// uncharged reports whether a store admitted any of res without charging
// its bucket (a failure policy): such a request is not settled.
func uncharged(res []ratelimit.Result) bool {
	for _, r := range res {
		if r.Uncharged {
			return true
		}
	}
	return false
}

// SettleField returns the field the request's usage comes in, and whether
// it is a trailer; ok is false when its route settles by no field (or the
// request was not charged). An engine reads it from the upstream's answer
// (the head for a header, the end of the body for a trailer) and passes
// it to ReportUsage.
func (l *Lease) SettleField() (name string, trailer, ok bool) {
	if l.settle.st == nil || l.settle.st.field == "" {
		return "", false, false
	}
	return l.settle.st.field, l.settle.st.trailer, true
}

// ReportUsage records the usage field's value as the upstream sent it.
func (l *Lease) ReportUsage(v string) { l.settle.usage = v }

// usageOf returns the value of the usage field name in h, a response
// writer's header after the handler returned: a trailer is there under its
// own name (declared in Trailer) or http.TrailerPrefix's.
func usageOf(h http.Header, name string, trailer bool) string {
	if v := h.Get(name); v != "" || !trailer {
		return v
	}
	return h.Get(http.TrailerPrefix + name)
}

// settleRequest settles the request of l's lease, answered with
// l.settle.status: its usage less the reserve, charged or refunded to
// every bucket the reserve was taken from, in one store call. A store that
// cannot settle, or fails to, leaves the reserve standing (counted and
// logged).
func (g *Gate) settleRequest(l *Lease) {
	p := &l.settle
	used, reported := p.st.charged(p.reserved, p.status, p.usage)
	delta := used - p.reserved
	if g.metrics != nil {
		g.metrics.settled(l.route.Name, p.reserved, used, reported)
	}
	if p.st.learn && reported && p.st.field != "" {
		p.st.observe(p.tenant, used)
	}
	if !reported && p.st.warnDue(g.now()) {
		g.log.Warn("settle: the upstream's answer has no usage; charged the reserve",
			"route", l.route.Name, "field", p.st.field, "reserve", p.st.reserve)
	}
	if delta == 0 {
		return
	}
	if bs, ok := g.backstop.(ratelimit.BackstopSettler); ok && p.global != nil {
		if err := bs.SettleBackstop(context.Background(), *p.global, p.tenant, delta); err != nil {
			g.settleFailed(l, "the backstop", err)
		}
	}
	s, ok := g.store.(ratelimit.Settler)
	if !ok {
		return
	}
	takes := p.takes[:p.n]
	for i := range takes {
		takes[i].Cost = delta
	}
	if err := s.Settle(context.Background(), g.settleID(), takes); err != nil {
		g.settleFailed(l, "the store", err)
	}
}

// settleFailed logs and counts a settlement of l's request that where
// (the store, the backstop) failed: its reserve stands there.
func (g *Gate) settleFailed(l *Lease, where string, err error) {
	g.log.Warn("settle: "+where+" failed; the reserve stands", "route", l.route.Name, "err", err)
	if g.metrics != nil {
		g.metrics.settle.errs.WithLabelValues(l.route.Name).Inc()
	}
}

// settleID names one settlement: this gate's nonce and a count, never a
// client's request ID (a client reusing one would make its settlements
// look like retries, and go uncharged).
func (g *Gate) settleID() string {
	return g.settleNonce + strconv.FormatUint(g.settleSeq.Add(1), 36)
}

// cost is what the shared layers weigh d's request by: its route's cost,
// or for a settled route the reserve its buckets were charged (a
// tenant's learned reserve, with settle.learn), so that the pools' fair
// queue serves tenants by what their requests use.
func (d *Decision) cost() float64 {
	if d.lease.settle.st != nil {
		return d.lease.settle.reserved
	}
	return d.Route.Cost
}
