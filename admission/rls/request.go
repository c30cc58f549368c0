package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/fairgate/fairgate/admission/ratelimit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// validate checks a request against what Envoy may send and the bounds
// of l: it rejects what no answer could mean (no domain, no descriptors,
// a limit override in a unit there is none of) and what is beyond l.
// What envoyproxy/ratelimit answers, this answers too: a descriptor with
// no entries, or an entry without a key, matches no configured
// descriptor (OK, not limited); is_negative_hits is ignored, the hits
// charged (a token bucket is never refunded).
func validate(req *rlsv3.RateLimitRequest, l Limits) error {
	if req.GetDomain() == "" {
		return status.Error(codes.InvalidArgument, "rls: domain: required")
	}
	n := len(req.GetDescriptors())
	if n == 0 {
		return status.Error(codes.InvalidArgument, "rls: descriptors: at least one is required")
	}
	if n > l.MaxDescriptors {
		return status.Errorf(codes.InvalidArgument, "rls: descriptors: %d in one request, more than rls.max_descriptors (%d)", n, l.MaxDescriptors)
	}
	for i, d := range req.Descriptors {
		if m := len(d.GetEntries()); m > l.MaxEntries {
			return status.Errorf(codes.InvalidArgument, "rls: descriptors[%d].entries: %d, more than rls.max_entries (%d)", i, m, l.MaxEntries)
		}
		if !validSettlement(d) {
			return status.Errorf(codes.InvalidArgument, "rls: descriptors[%d].entries: a %s entry must be the last, its value the tokens the request reserved (a whole number from 0 to 1e9)", i, SettleKey)
		}
		if o := d.GetLimit(); o != nil {
			if _, ok := overrideUnits[o.Unit]; !ok {
				return status.Errorf(codes.InvalidArgument, "rls: descriptors[%d].limit.unit: unknown unit %v", i, o.Unit)
			}
			if m := o.GetUnitMultiplier(); m != nil && m.Value == 0 {
				return status.Errorf(codes.InvalidArgument, "rls: descriptors[%d].limit.unit_multiplier: must be >= 1", i)
			} else if m != nil && uint64(m.Value) > uint64(maxOverrideWindow/overrideUnits[o.Unit].Duration()) {
				return status.Errorf(codes.InvalidArgument, "rls: descriptors[%d].limit.unit_multiplier: %d %v is longer than %v", i, m.Value, o.Unit, maxOverrideWindow)
			}
		}
	}
	return nil
}

// maxPath is the longest descriptor path kept as it is in a bucket key;
// longer ones are hashed, so a client's long values cost neither memory
// nor Redis key space.
const maxPath = 128

// bucketKey names a descriptor's bucket. Tenant is the domain (the Redis
// store hashes it into the key's hash tag), so that every bucket a request
// may be charged to is in one slot of a Redis Cluster and one TakeAll
// (one Lua call) charges them all or none; the "rls\x00" prefix keeps
// them apart from tenants' buckets, whose IDs hold no NUL. Scope is the
// request's entries, each length-prefixed so that no two paths collide,
// hashed when long. The price: on a cluster a domain's buckets live on
// one master; several domains spread over several.
func bucketKey(tag string, entries []*ratelimitEntry) ratelimit.BucketKey {
	n := 0
	for _, e := range entries {
		n += len(e.GetKey()) + len(e.GetValue()) + 8
	}
	// A path short enough to be kept is written on the stack: the
	// string is the key's one allocation.
	var arr [maxPath]byte
	b := arr[:0]
	if n > maxPath {
		b = make([]byte, 0, n)
	}
	for _, e := range entries {
		b = strconv.AppendInt(b, int64(len(e.GetKey())), 10)
		b = append(b, ':')
		b = append(b, e.GetKey()...)
		b = strconv.AppendInt(b, int64(len(e.GetValue())), 10)
		b = append(b, ':')
		b = append(b, e.GetValue()...)
	}
	k := ratelimit.BucketKey{Tenant: tag, Scope: string(b)}
	if len(b) > maxPath {
		sum := sha256.Sum256(b)
		k.Scope = "#" + hex.EncodeToString(sum[:16])
	}
	return k
}

// domainTag is the Tenant of domain's buckets (see bucketKey).
func domainTag(domain string) string { return "rls\x00" + domain }
