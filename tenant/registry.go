package tenant

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"strings"
)

// Tenant is a configured tenant with its quotas resolved (tier values with
// the tenant's overrides applied). A *Tenant from a Registry is shared and
// must not be modified.
type Tenant struct {
	ID   string
	Tier string
	// Rate (tokens per second) and Burst (tokens) of the tenant's bucket.
	Rate, Burst float64
	// MaxConcurrent caps the tenant's requests in flight; 0 means no cap.
	MaxConcurrent int
	// Rank is the tier's shedding rank (higher is shed later).
	Rank int
	// Pool is the bulkhead pool of the tenant's tier.
	Pool string
	// Groups holds the tier's per-route-group quotas.
	Groups map[string]Quota
	// Weight is the tenant's weight in the shared layers' fair shares
	// (> 0; 1 unless configured).
	Weight float64
	// CriticalReserve is how many requests above MaxConcurrent its
	// critical requests may hold (0 when there is no cap or no reserve).
	CriticalReserve int
	// Limits are the further buckets its requests are charged to with
	// its own, all or nothing (the tenant's limits, else its tier's).
	Limits []Limit
	// Mode is how its own and group buckets use a shared store (the
	// tier's); each limit has its own.
	Mode Mode
	// Shadow is true when its rate quotas decide without refusing
	// (the tenant's shadow, else its tier's).
	Shadow bool
	// Exempt: its requests pass the shared layers (TenantConfig.Exempt).
	Exempt bool
}

// CapFor returns the cap on the tenant's requests holding seats that
// applies to a request, on one of instances gateways: MaxConcurrent divided
// among the instances (rounded up), plus the critical reserve, divided
// likewise, for a critical request. Zero means no cap.
func (t *Tenant) CapFor(critical bool, instances int) int {
	if t.MaxConcurrent <= 0 {
		return 0
	}
	n := max(instances, 1)
	limit := t.MaxConcurrent
	if critical {
		limit += t.CriticalReserve
	}
	return (limit + n - 1) / n
}

// Registry finds tenants by API key and by ID. It is immutable once built,
// so it is safe for concurrent use; a config reload builds a new one.
type Registry struct {
	byHash map[[32]byte]keyEntry
	byID   map[string]*Tenant
	tiers  map[string]TierConfig
}

// NewRegistry validates c and builds a Registry from it.
func NewRegistry(c Config) (*Registry, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	r := &Registry{byHash: make(map[[32]byte]keyEntry, len(c.Tenants)), byID: make(map[string]*Tenant, len(c.Tenants)), tiers: c.Tiers}
	for _, tc := range c.Tenants {
		tier := c.Tiers[tc.Tier]
		t := new(tier.Defaults(tc.Tier))
		t.ID, t.Exempt = tc.ID, tc.Exempt
		if tc.Rate != nil {
			t.Rate = *tc.Rate
		}
		if tc.Burst != nil {
			t.Burst = *tc.Burst
		}
		if tc.MaxConcurrent != nil {
			t.MaxConcurrent = *tc.MaxConcurrent
			t.CriticalReserve = criticalReserve(t.MaxConcurrent, tier.CriticalReservePercent)
		}
		if tc.Limits != nil {
			t.Limits = resolveLimits(tc.Limits)
		}
		if tc.Shadow != nil {
			t.Shadow = *tc.Shadow
		}
		if tc.Weight != nil {
			t.Weight = *tc.Weight // in (0, 1e6]: checked by Validate
		}
		for _, h := range tc.APIKeysSHA256 {
			sum, _ := ParseKeyHash(h) // checked by Validate
			r.byHash[sum] = keyEntry{sum: sum, t: t}
		}
		r.byID[t.ID] = t
	}
	return r, nil
}

// Defaults returns what a tenant of this tier, named name, is when its
// own entry overrides nothing: the tier's quota, cap, rank, groups, mode
// and shadow, with the defaults filled in (the pool named like the tier,
// weight 1, the critical reserve of DefaultCriticalReservePercent) and the
// limits resolved. NewRegistry starts every tenant from it, so what
// `fairgate check-config` shows per tier is what its tenants get. ID is
// empty.
func (tc TierConfig) Defaults(name string) Tenant {
	t := Tenant{Tier: name, Rate: tc.Rate, Burst: tc.Burst, MaxConcurrent: tc.MaxConcurrent, Rank: tc.Rank,
		Pool: tc.Pool, Groups: tc.Groups, Weight: tc.Weight, Limits: resolveLimits(tc.Limits), Mode: tc.Mode, Shadow: tc.Shadow}
	if t.Pool == "" {
		t.Pool = name
	}
	if t.Weight <= 0 {
		t.Weight = 1
	}
	t.CriticalReserve = criticalReserve(t.MaxConcurrent, tc.CriticalReservePercent)
	return t
}

// criticalReserve is the reserve above a cap of maxConcurrent at pct
// percent (nil: DefaultCriticalReservePercent), rounded up and at least
// one when neither is zero.
func criticalReserve(maxConcurrent int, pct *int) int {
	p := DefaultCriticalReservePercent
	if pct != nil {
		p = *pct
	}
	if maxConcurrent <= 0 || p <= 0 {
		return 0
	}
	return max(1, (maxConcurrent*p+99)/100)
}

// resolveLimits resolves each of ls; nil when there are none.
func resolveLimits(ls []LimitConfig) []Limit {
	var out []Limit
	for _, l := range ls {
		out = append(out, l.Resolve())
	}
	return out
}

// Lookup returns the tenant whose API key is key. The key is hashed at once
// and not kept.
func (r *Registry) Lookup(key string) (*Tenant, bool) {
	sum := sha256.Sum256([]byte(key))
	e, ok := r.byHash[sum]
	// The map found e by the hash; the map's own key comparison may stop at
	// the first differing byte, so confirm in constant time as well. The
	// hash is what an attacker would have to steer, and cannot.
	if !ok || subtle.ConstantTimeCompare(e.sum[:], sum[:]) != 1 {
		return nil, false
	}
	return e.t, true
}

type keyEntry struct {
	sum [32]byte
	t   *Tenant
}

// ByID returns the tenant with the given ID.
func (r *Registry) ByID(id string) (*Tenant, bool) {
	t, ok := r.byID[id]
	return t, ok
}

// Tenants returns every configured tenant, in no particular order.
func (r *Registry) Tenants() []*Tenant {
	out := make([]*Tenant, 0, len(r.byID))
	for _, t := range r.byID {
		out = append(out, t)
	}
	return out
}

// Tiers returns the configured tiers. The map must not be modified.
func (r *Registry) Tiers() map[string]TierConfig { return r.tiers }

// HashKey returns the hex SHA-256 of an API key, as the config holds it.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// MaxKeyLen is the longest API key ExtractKey accepts.
const MaxKeyLen = 256

// KeySource says where a request presents its API key.
type KeySource uint8

const (
	// NoKey: the request presents no API key at all.
	NoKey KeySource = iota
	// BearerKey: the token of "Authorization: Bearer …".
	BearerKey
	// HeaderKey: the X-API-Key header.
	HeaderKey
)

// Credentials are the fields of a request an API key may come in, as its
// HTTP stack found them: the first Authorization value, and the X-API-Key
// values (none when it has none). The package reads no HTTP itself.
type Credentials struct {
	Authorization string
	APIKey        []string
}

// ExtractKey returns the API key a request presents: the token of an
// "Authorization: Bearer" header, else the X-API-Key header (also when
// Authorization carries another scheme, such as Basic for the upstream).
// It returns false when there is none, or when it is longer than MaxKeyLen
// or holds anything but visible ASCII (such a key cannot be one of ours).
func ExtractKey(c Credentials) (string, bool) {
	key, _, ok := FindKey(c)
	return key, ok
}

// FindKey is ExtractKey that also says where the key was presented. A
// request that presents a key which cannot be one of ours (ok false) still
// has a source, so that it is told its key is not valid rather than that
// it sent none.
func FindKey(c Credentials) (key string, src KeySource, ok bool) {
	const prefix = "bearer "
	if a := c.Authorization; len(a) >= len(prefix)-1 && strings.EqualFold(a[:len(prefix)-1], prefix[:len(prefix)-1]) &&
		(len(a) == len(prefix)-1 || a[len(prefix)-1] == ' ') {
		key, src = strings.TrimLeft(a[len(prefix)-1:], " "), BearerKey
	} else if len(c.APIKey) > 0 {
		key, src = c.APIKey[0], HeaderKey
	} else {
		return "", NoKey, false
	}
	if key == "" || len(key) > MaxKeyLen {
		return "", src, false
	}
	for i := 0; i < len(key); i++ {
		if key[i] <= ' ' || key[i] > '~' {
			return "", src, false
		}
	}
	return key, src, true
}
