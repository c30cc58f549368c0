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

// validate checks a request for what Envoy may send: it rejects what Envoy
// never sends and no answer could mean.
func validate(req *rlsv3.RateLimitRequest) error {
	if req.GetDomain() == "" {
		return status.Error(codes.InvalidArgument, "rls: domain: required")
	}
	if len(req.GetDescriptors()) == 0 {
		return status.Error(codes.InvalidArgument, "rls: descriptors: at least one is required")
	}
	for i, d := range req.Descriptors {
		if d == nil || len(d.Entries) == 0 {
			return status.Errorf(codes.InvalidArgument, "rls: descriptors[%d].entries: at least one is required", i)
		}
		for j, e := range d.Entries {
			if e == nil || e.Key == "" {
				return status.Errorf(codes.InvalidArgument, "rls: descriptors[%d].entries[%d].key: required", i, j)
			}
		}
		if d.IsNegativeHits {
			return status.Errorf(codes.InvalidArgument, "rls: descriptors[%d].is_negative_hits: not supported (a token bucket is never refunded)", i)
		}
		if o := d.GetLimit(); o != nil {
			if _, ok := overrideUnits[o.Unit]; !ok {
				return status.Errorf(codes.InvalidArgument, "rls: descriptors[%d].limit.unit: unknown unit %v", i, o.Unit)
			}
			if m := o.GetUnitMultiplier(); m != nil && m.Value == 0 {
				return status.Errorf(codes.InvalidArgument, "rls: descriptors[%d].limit.unit_multiplier: must be >= 1", i)
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
		n += len(e.Key) + len(e.Value) + 8
	}
	b := make([]byte, 0, n)
	for _, e := range entries {
		b = strconv.AppendInt(b, int64(len(e.Key)), 10)
		b = append(b, ':')
		b = append(b, e.Key...)
		b = strconv.AppendInt(b, int64(len(e.Value)), 10)
		b = append(b, ':')
		b = append(b, e.Value...)
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
