package rls_test

import (
	"fmt"
	"strings"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// erlSeq is one call sequence: run on fresh state (Redis flushed, a new
// fairgate store), its calls back to back.
type erlSeq struct {
	name  string
	calls []*rlsv3.RateLimitRequest
	// turns are the calls made just past a whole second, the runner
	// waiting for it: a window of a second has just ended.
	turns []int
}

// target is a node of the tree the sequences aim at, and how to write a
// request descriptor that reaches it.
type target struct {
	path  []*erlNode
	name  string // the configured path: key=value.key
	limit *limit // the node's rate_limit; nil for a node without one
}

// entries returns the request entries that reach t, variant v choosing
// the value of each key-only or wildcard level.
func (t *target) entries(v int) [][2]string {
	es := make([][2]string, len(t.path))
	for i, n := range t.path {
		es[i] = [2]string{n.Key, fillValue(n.Value, v)}
	}
	return es
}

// fillValue is a request value for a configured one: the value itself, a
// wildcard's "*"s filled in, or for a key-only node "v<v>".
func fillValue(value string, v int) string {
	switch {
	case value == "":
		return fmt.Sprintf("v%d", v)
	case strings.Contains(value, "*"):
		return strings.ReplaceAll(value, "*", fmt.Sprintf("w%d", v))
	}
	return value
}

func (t *target) keyOnly() bool {
	for _, n := range t.path {
		if n.Value == "" {
			return true
		}
	}
	return false
}

func (t *target) wildcard() (level int, ok bool) {
	for i, n := range t.path {
		if strings.Contains(n.Value, "*") {
			return i, true
		}
	}
	return 0, false
}

// targets lists f's nodes that a request can reach with the values
// fillValue writes (variants 1 to 3), in config order.
func targets(f *erlFile) []*target {
	var out []*target
	for _, p := range f.nodes() {
		t := &target{path: p}
		var names []string
		for _, n := range p {
			s := n.Key
			if n.Value != "" {
				s += "=" + n.Value
			}
			names = append(names, s)
		}
		t.name = strings.Join(names, ".")
		if rl := p[len(p)-1].RateLimit; rl != nil {
			t.limit = p[len(p)-1].limitOf()
		}
		reached := true
		for v := 1; v <= 3; v++ {
			reached = reached && f.erlMatch(t.entries(v)).node == p[len(p)-1]
		}
		if reached {
			out = append(out, t)
		}
	}
	return out
}

// sequences derives the call sequences of one config:
//
//   - every limited node on its own: "drain" (hits_addend 0 — meaning 1 —
//     and 1, a descriptor's own 0 and 2, a bulk to one below the limit,
//     the last, two over, a check while over, more than the limit),
//     "over first" (more than the limit on a fresh bucket, then one) and,
//     for the first limit per second, "turn" (the limit and one over, in
//     one second and again in the next);
//   - "values": a key-only level with several values, apart;
//   - "wildcard": values a wildcard matches (sharing a threshold or not),
//     and one it does not (falling to the key-only node, or out);
//   - "deeper": one entry more than the tree goes (not limited), "no
//     limit" for a node above the limits, "unknown" key and domain;
//   - "unlimited" and "zero" (requests_per_unit: 0) alone and with a
//     limited descriptor;
//   - several descriptors in one request: "pair" (two limited ones drained
//     together, a shadow one with an enforced one, two quota_mode ones, a
//     quota with a limit), "same entries" twice in one request, "mixed"
//     (a limited one with every unlimited one, every node without a limit and every zero);
//   - "replaces": the replacing descriptor with the one it replaces, in
//     both orders, then the replaced one alone;
//   - request-level overrides: on a limited descriptor, on a spent one
//     with a higher limit ("override raises") or in another unit
//     ("override unit"), on a key the config does not know (one with a
//     unit_multiplier), on a shadow one;
//   - with malformed, requests fairgate refuses or ERL fails: no domain,
//     no descriptors, one with no entries, an empty key, is_negative_hits,
//     more than rls.max_descriptors, an override of unknown unit (last:
//     it may end ERL's process).
func sequences(f *erlFile, malformed bool) []erlSeq {
	ts := targets(f)
	var out []erlSeq
	add := func(name string, calls ...*rlsv3.RateLimitRequest) {
		out = append(out, erlSeq{name: name, calls: calls})
	}
	req := func(hits uint32, ds ...*commonrl.RateLimitDescriptor) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: f.Domain, HitsAddend: hits, Descriptors: ds}
	}
	var limited, shadowed, quotas []*target // rate limited, requests_per_unit > 0
	var unlimited, zero, open []*target
	for _, t := range ts {
		switch {
		case t.limit == nil:
			open = append(open, t)
		case t.limit.unlimited:
			unlimited = append(unlimited, t)
		case t.limit.rpu == 0:
			zero = append(zero, t)
		default:
			limited = append(limited, t)
			if t.limit.shadow {
				shadowed = append(shadowed, t)
			}
			if t.limit.quota {
				quotas = append(quotas, t)
			}
		}
	}
	turned := false
	for _, t := range limited {
		d := func(v int) *commonrl.RateLimitDescriptor { return descOf(t.entries(v)) }
		r := t.limit.rpu
		// hits_addend: 0 (means 1), 1, a descriptor's 0 and 2, a bulk
		// that leaves one, the last, two over, a descriptor's 0 while
		// over, and more than the limit.
		calls := []*rlsv3.RateLimitRequest{req(0, d(1)), req(1, d(1)), req(5, withHits(d(1), 0)), req(5, withHits(d(1), 2))}
		if r > 5 {
			calls = append(calls, req(r-5, d(1)))
		}
		calls = append(calls, req(1, d(1)), req(1, d(1)), req(1, d(1)), req(0, withHits(d(1), 0)), req(r+3, d(1)))
		add("drain "+t.name, calls...)
		// More than the limit on a fresh counter, then one.
		add("over first "+t.name, req(r+1, d(1)), req(1, d(1)), req(1, d(1)))
		if t.limit.unit == rlsv3.RateLimitResponse_RateLimit_SECOND && !turned {
			// The whole limit, then one over; in the next second the
			// same: ERL's window has turned over. Once a config: each
			// waits for a second's end.
			turned = true
			out = append(out, erlSeq{name: "turn " + t.name, turns: []int{2},
				calls: []*rlsv3.RateLimitRequest{req(r, d(1)), req(1, d(1)), req(r, d(1)), req(1, d(1))}})
		}
		if t.keyOnly() {
			add("values "+t.name, req(1, d(1)), req(1, d(2)), req(r, d(1)), req(1, d(1)), req(1, d(3)), req(1, d(2)))
		}
		if lv, ok := t.wildcard(); ok {
			es := t.entries(1)
			es[lv][1] = "nomatch" + es[lv][1]
			calls := []*rlsv3.RateLimitRequest{req(1, d(1)), req(1, d(2)), req(r, d(1)), req(1, d(2)), req(1, d(3))}
			if f.erlMatch(es).node != t.path[len(t.path)-1] {
				calls = append(calls, req(1, descOf(es)), req(1, descOf(es)))
			}
			add("wildcard "+t.name, calls...)
		}
		// One entry more than the tree goes: not limited (README
		// example 4); and the node above, when it has no limit.
		deeper := append(t.entries(1), [2]string{"erldiff_extra", "x"})
		add("deeper "+t.name, req(1, descOf(deeper)), req(1, descOf(deeper)))
	}
	for _, t := range open {
		add("no limit "+t.name, req(1, descOf(t.entries(1))), req(1, descOf(t.entries(1))))
	}
	for _, t := range unlimited {
		calls := []*rlsv3.RateLimitRequest{req(1, descOf(t.entries(1))), req(7, descOf(t.entries(1)))}
		if len(limited) > 0 {
			l := descOf(limited[0].entries(1))
			calls = append(calls, req(1, descOf(t.entries(1)), l), req(1, l, descOf(t.entries(1))))
		}
		add("unlimited "+t.name, calls...)
	}
	for _, t := range zero {
		calls := []*rlsv3.RateLimitRequest{req(1, descOf(t.entries(1))), req(0, withHits(descOf(t.entries(1)), 0))}
		if len(limited) > 0 {
			l := limited[0]
			calls = append(calls, req(1, descOf(t.entries(1)), descOf(l.entries(1))), req(1, descOf(l.entries(1))))
		}
		add("zero "+t.name, calls...)
	}
	add("unknown", req(1, descOf([][2]string{{"erldiff_unknown", "x"}})),
		&rlsv3.RateLimitRequest{Domain: "erldiff_no_such_domain", Descriptors: []*commonrl.RateLimitDescriptor{descOf([][2]string{{"k", "v"}})}})

	// Several descriptors in one request.
	var pairs [][2]*target
	if len(shadowed) > 0 {
		for _, t := range limited {
			if !t.limit.shadow {
				pairs = append(pairs, [2]*target{t, shadowed[0]})
				break
			}
		}
	}
	// quota_mode: two quotas (over only when both are), and a quota with
	// a descriptor that is none.
	if len(quotas) > 1 {
		pairs = append(pairs, [2]*target{quotas[0], quotas[1]})
	}
	if len(quotas) > 0 {
		for _, t := range limited {
			if !t.limit.quota && !t.limit.shadow {
				pairs = append(pairs, [2]*target{quotas[0], t})
				break
			}
		}
	}
	for i := 0; i+1 < len(limited) && len(pairs) < 3+min(len(quotas), 2); i++ {
		pairs = append(pairs, [2]*target{limited[i], limited[i+1]})
	}
	for _, p := range pairs {
		a, b := descOf(p[0].entries(1)), descOf(p[1].entries(1))
		r := min(p[0].limit.rpu, p[1].limit.rpu)
		var calls []*rlsv3.RateLimitRequest
		if r > 5 {
			calls = append(calls, req(r-4, a, b))
		}
		for range min(r, 5) + 2 {
			calls = append(calls, req(1, a, b))
		}
		calls = append(calls, req(1, b), req(1, a), req(1, withHits(descOf(p[0].entries(1)), 0), b))
		add("pair "+p[0].name+" + "+p[1].name, calls...)
	}
	if len(limited) > 0 {
		t := limited[0]
		a := descOf(t.entries(1))
		calls := []*rlsv3.RateLimitRequest{req(1, a, a), req(1, withHits(descOf(t.entries(1)), 2), a), req(1, a, a)}
		if t.limit.rpu > 5 {
			calls = append(calls, req(t.limit.rpu-4, a, a))
		}
		calls = append(calls, req(1, a, a))
		add("same entries "+t.name, calls...)
		var mixed []*commonrl.RateLimitDescriptor
		for _, o := range append(append(unlimited, open...), zero...) {
			mixed = append(mixed, descOf(o.entries(1)))
		}
		if len(mixed) > 0 {
			ds := append([]*commonrl.RateLimitDescriptor{a}, mixed...)
			add("mixed "+t.name, req(1, ds...), req(1, ds...), req(1, a))
		}
	}

	// replaces: the replacing descriptor with the one it replaces, in
	// both orders, and the replaced one alone.
	for _, y := range append(append([]*target(nil), limited...), unlimited...) {
		for _, name := range y.limit.replaces {
			for _, x := range append(append(append([]*target(nil), limited...), zero...), unlimited...) {
				if x.limit.name != name || x == y {
					continue
				}
				dy, dx := descOf(y.entries(1)), descOf(x.entries(1))
				var calls []*rlsv3.RateLimitRequest
				for range min(y.limit.rpu, 4) + 1 {
					calls = append(calls, req(1, dy, dx))
				}
				calls = append(calls, req(1, dx, dy), req(1, dx))
				add("replaces "+y.name+" > "+x.name, calls...)
			}
		}
	}

	// Request-level limit overrides: on a limited descriptor, on one the
	// config does not know, with a unit multiplier, on a shadow one.
	ovUnit := func(d *commonrl.RateLimitDescriptor, rpu uint32, unit typev3.RateLimitUnit, mult uint32) *commonrl.RateLimitDescriptor {
		d.Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit}
		if mult > 0 {
			d.Limit.UnitMultiplier = wrapperspb.UInt32(mult)
		}
		return d
	}
	ov := func(d *commonrl.RateLimitDescriptor, rpu uint32, mult uint32) *commonrl.RateLimitDescriptor {
		return ovUnit(d, rpu, typev3.RateLimitUnit_MINUTE, mult)
	}
	unknown := func(v string) *commonrl.RateLimitDescriptor { return descOf([][2]string{{"erldiff_unknown", v}}) }
	if len(limited) > 0 {
		t := limited[0]
		var calls []*rlsv3.RateLimitRequest
		for range 5 {
			calls = append(calls, req(1, ov(descOf(t.entries(1)), 3, 0)))
		}
		add("override "+t.name, calls...)
		// A higher limit on the same entries and unit, once the
		// configured one is spent (ERL: one counter for both).
		if u, ok := overrideUnitOf(t.limit.unit); ok {
			d := func() *commonrl.RateLimitDescriptor { return descOf(t.entries(1)) }
			add("override raises "+t.name, req(t.limit.rpu, d()), req(1, ovUnit(d(), t.limit.rpu+2, u, 0)), req(1, ovUnit(d(), t.limit.rpu+2, u, 0)), req(1, d()))
		}
		// The same entries in another unit, once the configured limit is
		// spent (ERL: a counter per unit's window).
		other := typev3.RateLimitUnit_HOUR
		if t.limit.unit == rlsv3.RateLimitResponse_RateLimit_HOUR {
			other = typev3.RateLimitUnit_MINUTE
		}
		d := func() *commonrl.RateLimitDescriptor { return descOf(t.entries(1)) }
		add("override unit "+t.name, req(t.limit.rpu, d()), req(1, ovUnit(d(), t.limit.rpu+2, other, 0)), req(1, d()), req(1, ovUnit(d(), t.limit.rpu+2, other, 0)))
	}
	add("override unknown key", req(1, ov(unknown("a"), 2, 0)), req(1, ov(unknown("a"), 2, 0)), req(1, ov(unknown("a"), 2, 0)),
		req(1, ov(unknown("b"), 1, 2)), req(1, ov(unknown("b"), 1, 2)))
	if len(shadowed) > 0 {
		t := shadowed[0]
		var calls []*rlsv3.RateLimitRequest
		for range 4 {
			calls = append(calls, req(1, ov(descOf(t.entries(1)), 2, 0)))
		}
		add("override shadow "+t.name, calls...)
	}

	if malformed {
		neg := unknown("neg")
		neg.IsNegativeHits = true
		var many []*commonrl.RateLimitDescriptor
		for i := range maxDescriptors + 1 {
			many = append(many, unknown(fmt.Sprint(i)))
		}
		add("malformed",
			&rlsv3.RateLimitRequest{Descriptors: []*commonrl.RateLimitDescriptor{unknown("a")}},
			&rlsv3.RateLimitRequest{Domain: f.Domain},
			req(1, &commonrl.RateLimitDescriptor{}),
			req(1, descOf([][2]string{{"", "v"}})),
			req(1, neg),
			req(1, many...),
			req(1, ovUnit(unknown("u"), 1, typev3.RateLimitUnit_UNKNOWN, 0)))
	}
	return out
}

// overrideUnitOf is the override unit of a response unit; Envoy's
// overrides have no week.
func overrideUnitOf(u rlsv3.RateLimitResponse_RateLimit_Unit) (typev3.RateLimitUnit, bool) {
	if u == rlsv3.RateLimitResponse_RateLimit_WEEK || u == rlsv3.RateLimitResponse_RateLimit_UNKNOWN {
		return 0, false
	}
	return typev3.RateLimitUnit(u), true
}

func descOf(entries [][2]string) *commonrl.RateLimitDescriptor {
	d := &commonrl.RateLimitDescriptor{}
	for _, e := range entries {
		d.Entries = append(d.Entries, &commonrl.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
	}
	return d
}

func withHits(d *commonrl.RateLimitDescriptor, n uint64) *commonrl.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}
