package tenant

import (
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/fairgate/fairgate/internal/suggest"
)

// Config is the tenant part of the config file: tiers and tenants.
type Config struct {
	// Tiers maps a tier name to its quotas.
	Tiers map[string]TierConfig `yaml:"tiers"`
	// Tenants lists the tenants and their API keys' hashes.
	Tenants []TenantConfig `yaml:"tenants"`
}

// TierConfig is the quota every tenant of a tier gets unless its own entry
// overrides it.
type TierConfig struct {
	// Rate is the sustained rate in tokens per second. Must be > 0.
	Rate float64 `yaml:"rate"`
	// Burst is the bucket size in tokens. Must be > 0; a route whose cost
	// is above it could never pass, which the gateway rejects at load.
	Burst float64 `yaml:"burst"`
	// MaxConcurrent caps one tenant's requests in flight across the
	// gateway. Zero means no cap.
	MaxConcurrent int `yaml:"max_concurrent"`
	// Rank orders tiers when the gateway sheds load: a higher rank is shed
	// later. Zero is the lowest. Must be in [0, 4].
	Rank int `yaml:"rank"`
	// Pool names the bulkhead pool this tier's requests use. Empty means a
	// pool named like the tier.
	Pool string `yaml:"pool"`
	// Groups gives the tier a quota per route group: a route with a group
	// is charged to the tenant's bucket and to its bucket for that group.
	Groups map[string]Quota `yaml:"groups"`
	// Weight is each of the tier's tenants' weight in the shared layers'
	// fair shares (the global backstop, a pool's seats): an active tenant's
	// share is the layer's capacity × its weight ÷ the sum of the active
	// tenants' weights, what light tenants leave going to the heavy ones.
	// Zero means 1: every tenant alike, whatever its tier (a tier's rate is
	// its quota; the weight is how an overload is split).
	Weight float64 `yaml:"weight"`
	// CriticalReservePercent lets a tenant's critical requests hold up to
	// this percentage more than MaxConcurrent (rounded up, at least one
	// when above zero), so its own default and sheddable work cannot lock
	// out its critical reads. Nil means 25; 0 turns the reserve off.
	CriticalReservePercent *int `yaml:"critical_reserve_percent"`
	// Limits are further buckets each of the tier's tenants is charged
	// to, besides its own (rate, burst): a daily quota beside the
	// per-second burst, say. A request takes its cost from every one of
	// them and from its own bucket at once, all or nothing. Empty means
	// none; at most MaxLimits.
	Limits []LimitConfig `yaml:"limits"`
	// Mode is how the tier's own and group buckets use a shared store
	// (Redis): "exact", "sync", or empty for the store's mode
	// (redis.mode). A limit may set its own. The embedded store decides
	// every bucket in process, whatever the mode.
	Mode Mode `yaml:"mode"`
	// Shadow puts the tier's rate quotas (the tenant's bucket, its group
	// buckets and its limits) in shadow mode: they decide and take tokens
	// as usual, but a request they would refuse is admitted and counted
	// as a would-be rejection. False (the default) enforces them.
	Shadow bool `yaml:"shadow"`
}

// LimitConfig is one of the buckets under limits: Burst tokens, refilled
// at Rate tokens a second or, when Per is set instead, Burst tokens every
// Per ({name: daily, burst: 100000, per: 24h}).
type LimitConfig struct {
	// Name names the bucket in the RateLimit-Policy header, spans and
	// logs: 1 to 64 letters, digits, '.', '_' or '-', unique among the
	// limits, neither "tenant" nor a group's name.
	Name string `yaml:"name"`
	// Burst is the bucket's capacity in tokens, as a tier's burst.
	Burst float64 `yaml:"burst"`
	// Rate is the refill rate in tokens per second. Set Rate or Per, not
	// both.
	Rate float64 `yaml:"rate"`
	// Per is the time the bucket takes to refill from empty: the rate is
	// Burst/Per. At least a millisecond, at most MaxRefill seconds. A
	// duration (24h) or a calendar unit (second, minute, hour, day, week,
	// month, year: as a bucket's, a day is 24 hours, a month 30 days, a
	// year 365).
	Per Period `yaml:"per"`
	// Window is "bucket" (the default: a token bucket) or "fixed": Burst
	// requests per window, all back when it ends. A fixed window of a
	// unit starts at the unit's start in TimeZone (a day at midnight,
	// a week on Monday, a month on its first day); of a duration, at each
	// multiple of it since the Unix epoch (per: 1h is each whole hour of
	// UTC). Needs Per.
	Window string `yaml:"window"`
	// TimeZone is the IANA time zone (Europe/Berlin) a fixed window's
	// unit is counted in; UTC when empty.
	TimeZone string `yaml:"time_zone"`
	// Mode is how this bucket uses a shared store, as TierConfig.Mode:
	// a daily quota may stay exact while a per-second burst limit syncs.
	// Empty means the store's mode (not the tier's).
	Mode Mode `yaml:"mode"`
}

// Mode is how a bucket uses a shared store (Redis): ModeStore, the
// store's own mode, ModeExact (a script call a decision) or ModeSync
// (decided in process, reconciled every sync_interval).
type Mode string

// The modes.
const (
	ModeStore Mode = ""
	ModeExact Mode = "exact"
	ModeSync  Mode = "sync"
)

// valid reports whether m is one of the modes.
func (m Mode) valid() bool { return m == ModeStore || m == ModeExact || m == ModeSync }

// MaxLimits is the most buckets a tier's or a tenant's limits may list.
const MaxLimits = 4

// Limit is a LimitConfig resolved: a named quota, its mode, and its fixed
// window (zero for a token bucket, whose Rate is then its refill; a
// window's Rate is the nominal Burst/Per).
type Limit struct {
	Name string
	Quota
	Mode   Mode
	Window Window
}

// Resolve returns l as a Limit: its Per turned into a rate, its window
// resolved.
func (l LimitConfig) Resolve() Limit {
	q := Quota{Rate: l.Rate, Burst: l.Burst}
	if per := l.Per.Length(); per > 0 {
		q.Rate = l.Burst / per.Seconds()
	}
	out := Limit{Name: l.Name, Quota: q, Mode: l.Mode}
	if l.Window == WindowFixed {
		out.Window = Window{Unit: l.Per.Unit, Every: l.Per.D, TimeZone: l.TimeZone}
	}
	return out
}

// validateLimits checks a tier's or a tenant's limits, each named by its
// path under path ("tiers.pro.limits[1].per: …"); groups are the names the
// limits must not take.
func validateLimits(path string, ls []LimitConfig, groups map[string]Quota) error {
	var errs []error
	if len(ls) > MaxLimits {
		errs = append(errs, fmt.Errorf("%s: %d limits; at most %d", path, len(ls), MaxLimits))
	}
	seen := make(map[string]int, len(ls))
	for i, l := range ls {
		f := fmt.Sprintf("%s[%d]", path, i)
		_, group := groups[l.Name]
		switch j, dup := seen[l.Name]; {
		case !validID(l.Name):
			errs = append(errs, fmt.Errorf("%s.name: must be 1-64 letters, digits, '.', '_' or '-' (got %q)", f, clip(l.Name)))
		case l.Name == "tenant" || group:
			errs = append(errs, fmt.Errorf("%s.name: %q already names the tenant's bucket or a group's", f, l.Name))
		case dup:
			errs = append(errs, fmt.Errorf("%s.name: duplicate limit %q: also %s[%d]", f, l.Name, path, j))
		}
		seen[l.Name] = i
		if !l.Mode.valid() {
			errs = append(errs, fmt.Errorf("%s.mode: must be exact or sync (or absent: the store's mode), got %q", f, clip(string(l.Mode))))
		}
		per := l.Per.Length()
		switch {
		case l.Per.word != "":
			errs = append(errs, fmt.Errorf("%s.per: must be a duration (24h) or one of second, minute, hour, day, week, month, year; got %q", f, clip(l.Per.word)))
		case l.Rate != 0 && !l.Per.IsZero():
			errs = append(errs, fmt.Errorf("%s: set rate or per, not both", f))
		case l.Per.IsZero():
			if err := l.Resolve().Quota.Validate(f); err != nil {
				errs = append(errs, err)
			}
		case per < time.Millisecond || per.Seconds() > MaxRefill:
			errs = append(errs, fmt.Errorf("%s.per: must be at least 1ms and at most %g s, got %v", f, float64(MaxRefill), l.Per))
		case !(l.Burst >= 1) || l.Burst > MaxBurst:
			errs = append(errs, fmt.Errorf("%s.burst: must be >= 1 and at most %g (tokens), got %v", f, float64(MaxBurst), l.Burst))
		case l.Burst/per.Seconds() > MaxRate:
			errs = append(errs, fmt.Errorf("%s.per: burst/per is %g tokens a second; at most %g", f, l.Burst/per.Seconds(), float64(MaxRate)))
		}
		errs = append(errs, validateWindow(f, l)...)
	}
	return errors.Join(errs...)
}

// DefaultCriticalReservePercent is the critical reserve above a tier's
// max_concurrent when the tier sets none.
const DefaultCriticalReservePercent = 25

// Quota is a rate in tokens per second and a burst in tokens.
type Quota struct {
	Rate  float64 `yaml:"rate"`
	Burst float64 `yaml:"burst"`
}

// Limits every quota keeps, wherever it is configured (a tier, a tenant's
// override, a group, the global backstop, the per-IP buckets): one rule,
// so that a value one store accepts no other refuses at run time.
const (
	// MaxRate is the highest rate, in tokens per second.
	MaxRate = 1e9
	// MaxBurst is the largest burst, in tokens.
	MaxBurst = 1e12
)

// Validate checks q and returns every problem, each naming its field under
// path (for example "tiers.pro.groups.exports.burst: …"): a finite rate in
// (0, MaxRate] tokens a second, a finite burst in [1, MaxBurst] tokens (a
// request costs at least 1), and a refill from empty (burst/rate) of at
// most MaxRefill seconds.
func (q Quota) Validate(path string) error {
	var errs []error
	if !(q.Rate > 0) || q.Rate > MaxRate {
		errs = append(errs, fmt.Errorf("%s.rate: must be > 0 and at most %g (tokens per second), got %v", path, float64(MaxRate), q.Rate))
	}
	if !(q.Burst >= 1) || q.Burst > MaxBurst {
		errs = append(errs, fmt.Errorf("%s.burst: must be >= 1 and at most %g (tokens), got %v", path, float64(MaxBurst), q.Burst))
	}
	if q.Rate > 0 && q.Burst/q.Rate > MaxRefill {
		errs = append(errs, fmt.Errorf("%s.burst: refills in %.3g s (burst/rate); at most %g s", path, q.Burst/q.Rate, float64(MaxRefill)))
	}
	return errors.Join(errs...)
}

// TenantConfig is one tenant.
type TenantConfig struct {
	// ID names the tenant in logs, spans, metrics, headers and store keys:
	// 1 to 64 characters of letters, digits, '.', '_' and '-'.
	ID string `yaml:"id"`
	// Tier is the name of one of the configured tiers.
	Tier string `yaml:"tier"`
	// APIKeysSHA256 holds the hex SHA-256 of each of the tenant's API keys
	// (`fairgate hash-key` prints it). An optional "sha256:" prefix is
	// accepted. Never the raw key.
	APIKeysSHA256 []string `yaml:"api_keys_sha256"`
	// Rate, Burst and MaxConcurrent override the tier's values when set.
	Rate          *float64 `yaml:"rate,omitempty"`
	Burst         *float64 `yaml:"burst,omitempty"`
	MaxConcurrent *int     `yaml:"max_concurrent,omitempty"`
	// Weight overrides the tier's weight in fair shares.
	Weight *float64 `yaml:"weight,omitempty"`
	// Limits, when set, replace the tier's limits for this tenant (an
	// empty list removes them).
	Limits []LimitConfig `yaml:"limits,omitempty"`
	// Shadow, when set, overrides the tier's shadow mode for this tenant.
	Shadow *bool `yaml:"shadow,omitempty"`
	// Exempt passes the tenant's requests through every shared layer
	// (the global backstop, shedding, the bulkhead pools and the adaptive
	// limit) without waiting, as Kubernetes API Priority and Fairness's
	// exempt priority level does: the control plane, an operator's own
	// tooling. Its own quotas and cap still apply.
	Exempt bool `yaml:"exempt,omitempty"`
}

// MaxRefill is the longest a bucket may take to refill from empty
// (burst ÷ rate), in seconds: about 31 years. Beyond it the arithmetic in
// nanoseconds and the stores' expiry times would overflow.
const MaxRefill = 1e9

// MaxRank is the highest tier rank.
const MaxRank = 4

// Validate checks c and returns every problem found, each naming its field
// (for example "tiers.pro.rate: must be > 0").
func (c *Config) Validate() error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, a...)))
	}
	if len(c.Tiers) == 0 {
		bad("tiers", "at least one tier is required")
	}
	for _, name := range sortedKeys(c.Tiers) {
		t := c.Tiers[name]
		f := "tiers." + PathKey(name)
		if !validID(name) {
			bad(f, "tier name must be 1-64 letters, digits, '.', '_' or '-'")
		}
		if err := (Quota{Rate: t.Rate, Burst: t.Burst}).Validate(f); err != nil {
			errs = append(errs, err)
		}
		if t.MaxConcurrent < 0 {
			bad(f+".max_concurrent", "must be >= 0 (0 means no cap)")
		}
		if !t.Mode.valid() {
			bad(f+".mode", "must be exact or sync (or absent: the store's mode), got %q", clip(string(t.Mode)))
		}
		if t.Rank < 0 || t.Rank > MaxRank {
			bad(f+".rank", "must be in [0, %d]", MaxRank)
		}
		if t.Weight < 0 || t.Weight > 1e6 || t.Weight != t.Weight {
			bad(f+".weight", "must be in (0, 1000000] (0 or absent means 1)")
		}
		if p := t.CriticalReservePercent; p != nil && (*p < 0 || *p > 1000) {
			bad(f+".critical_reserve_percent", "must be in [0, 1000]")
		}
		for _, g := range sortedKeys(t.Groups) {
			q := t.Groups[g]
			if !validID(g) {
				bad(f+".groups."+PathKey(g), "group name must be 1-64 letters, digits, '.', '_' or '-'")
			}
			if err := q.Validate(f + ".groups." + PathKey(g)); err != nil {
				errs = append(errs, err)
			}
		}
		if err := validateLimits(f+".limits", t.Limits, t.Groups); err != nil {
			errs = append(errs, err)
		}
	}
	ids := make(map[string]int, len(c.Tenants))
	hashes := make(map[[32]byte]string, len(c.Tenants))
	for i, tc := range c.Tenants {
		f := fmt.Sprintf("tenants[%d]", i)
		if !validID(tc.ID) {
			bad(f+".id", "must be 1-64 letters, digits, '.', '_' or '-' (got %q)", clip(tc.ID))
		} else {
			f = fmt.Sprintf("tenants[%d] (%s)", i, tc.ID)
			if j, dup := ids[tc.ID]; dup {
				bad(f+".id", "duplicate tenant: also tenants[%d]", j)
			}
			ids[tc.ID] = i
		}
		if _, ok := c.Tiers[tc.Tier]; !ok {
			tiers := sortedKeys(c.Tiers)
			bad(f+".tier", "unknown tier %q (have %s)%s", clip(tc.Tier), joinKeys(tiers), suggest.DidYouMean(tc.Tier, tiers))
		}
		if len(tc.APIKeysSHA256) == 0 {
			bad(f+".api_keys_sha256", "at least one key hash is required")
		}
		for j, h := range tc.APIKeysSHA256 {
			sum, err := ParseKeyHash(h)
			if err != nil {
				bad(fmt.Sprintf("%s.api_keys_sha256[%d]", f, j), "%v", err)
				continue
			}
			if other, dup := hashes[sum]; dup {
				bad(fmt.Sprintf("%s.api_keys_sha256[%d]", f, j), "duplicate key hash: also used by %s", other)
			}
			hashes[sum] = tc.ID
		}
		if tier, ok := c.Tiers[tc.Tier]; ok && (tc.Rate != nil || tc.Burst != nil) {
			// The tenant's own quota: its overrides over its tier's.
			q := Quota{Rate: tier.Rate, Burst: tier.Burst}
			if tc.Rate != nil {
				q.Rate = *tc.Rate
			}
			if tc.Burst != nil {
				q.Burst = *tc.Burst
			}
			if err := q.Validate(f); err != nil {
				errs = append(errs, err)
			}
		}
		if tc.MaxConcurrent != nil && *tc.MaxConcurrent < 0 {
			bad(f+".max_concurrent", "must be >= 0 (0 means no cap)")
		}
		if w := tc.Weight; w != nil && !(*w > 0 && *w <= 1e6) {
			bad(f+".weight", "must be in (0, 1000000]")
		}
		if tc.Limits != nil {
			if err := validateLimits(f+".limits", tc.Limits, c.Tiers[tc.Tier].Groups); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// ParseKeyHash parses a hex SHA-256 as written in the config.
func ParseKeyHash(s string) ([32]byte, error) {
	var sum [32]byte
	s = strings.TrimPrefix(s, "sha256:")
	if len(s) != 64 {
		return sum, fmt.Errorf("want 64 hex digits of a SHA-256 (fairgate hash-key prints it), got %d characters", len(s))
	}
	if _, err := hex.Decode(sum[:], []byte(s)); err != nil {
		return sum, fmt.Errorf("not hex: %v", err)
	}
	return sum, nil
}

// PathKey returns a map key as it stands in a field path of an error: as
// it is when it is a valid name, quoted (with any newline escaped) when it
// is not, so that an error names the field on one line.
func PathKey(k string) string {
	if validID(k) {
		return k
	}
	return strconv.Quote(k)
}

// joinKeys lists names for an error message, each as PathKey gives it.
func joinKeys(keys []string) string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = PathKey(k)
	}
	return strings.Join(out, ", ")
}

// validID reports whether s is a safe identifier: it may appear in a header,
// a log line, a metric label or a store key as it is.
func validID(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ValidID reports whether s may be a tenant, tier, group or pool name.
func ValidID(s string) bool { return validID(s) }

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return slices.Clip(keys)
}
