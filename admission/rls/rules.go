package rls

import (
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// Rules are the compiled descriptor trees of every configured domain. A
// Rules is immutable once built, so decisions read it without a lock and a
// reload swaps the whole value.
type Rules struct {
	domains map[string]*level
}

// Domains returns the configured domains, sorted.
func (r *Rules) Domains() []string {
	out := make([]string, 0, len(r.domains))
	for d := range r.domains {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// level is the children of one node, indexed as child reads them: by key
// and value (every child with a value, a wildcard one by its text), the
// wildcard children in config order, and by key alone.
type level struct {
	exact map[entryKey]*node
	// wild holds the children with a "*" in their value or key, in the
	// order the config lists them (across merged files, the order the
	// files are read): the first that matches wins.
	wild  []*node
	byKey map[string]*node
	// tag is, on a domain's top level, the Tenant of the domain's buckets
	// (domainTag), made once rather than per call.
	tag string
}

type entryKey struct{ key, value string }

// node is one configured descriptor.
type node struct {
	key, value string // value "" means any; a "*" in it (or in key) a wildcard
	// path names the node in metrics and spans: the configured keys and
	// values from the domain down ("remote_address", "path=/foo.method"),
	// bounded by the config whatever the requests send.
	path string
	// pat is the compiled wildcard of a node in its level's wild list;
	// nil for a node without "*".
	pat *pattern
	// src and field name where the node is configured, for the error on
	// a second descriptor with the same key and value.
	src, field string
	limit      *rule // nil: no rate_limit here
	shadow     bool
	children   level
}

// rule is a compiled rate_limit.
type rule struct {
	// name is the policy name (rate_limit.name, else the node's path).
	name            string
	configuredName  string // rate_limit.name as written; replaces refers to it
	replaces        []string
	unit            Unit
	requestsPerUnit uint32 // 0 when unlimited
	unlimited       bool
	// quotaMode is the descriptor's quota_mode: a quota descriptor over
	// its limit refuses the request only when every quota descriptor of
	// the request is over (envoyproxy/ratelimit's rule); its own status
	// is still OVER_LIMIT. False for a request-level override.
	quotaMode bool
	// metadata is the descriptor's metadata, which envoyproxy/ratelimit
	// can return in the response's dynamic_metadata (not sent here); nil
	// when none. It is shared by every call: clone it (proto.Clone)
	// before merging into it.
	metadata *structpb.Struct
	// shared is, for a rule under a share_threshold wildcard, one item
	// per descriptor entry: the wildcard ("key_value" as written) that
	// names the entry in the bucket key, or "" for an entry named by its
	// value. Nil when no entry shares (see bucketKey).
	shared []string
	// unitMultiplier is a request-level override's multiplier of unit
	// (window = unit × multiplier); 0 or 1 means none.
	unitMultiplier uint32
	// limit is the token bucket: burst requestsPerUnit refilled over one
	// unit. Under a fixed window the call's Limit is made from it per
	// call (Service.limitAt).
	limit ratelimit.Limit
	// window is the unit's length (times an override's multiplier): a
	// bucket's refill time, or a fixed window's length.
	window time.Duration
	// mode is the rate_limit's window as written; WindowDefault follows
	// rls.window (Service.fixed).
	mode Window
}

// newRule returns the rule of requests per window, named name.
func newRule(name string, rpu uint32, u Unit, window time.Duration) *rule {
	r := &rule{name: name, unit: u, requestsPerUnit: rpu, window: window}
	if rpu > 0 && window > 0 {
		r.limit = ratelimit.Limit{Rate: float64(rpu) / window.Seconds(), Burst: float64(rpu)}
	}
	return r
}
