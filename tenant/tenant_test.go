package tenant

import (
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func validConfig() Config {
	return Config{
		Tiers: map[string]TierConfig{
			"pro":     {Rate: 20, Burst: 100, MaxConcurrent: 4, Rank: 1},
			"starter": {Rate: 5, Burst: 25},
		},
		Tenants: []TenantConfig{
			{ID: "globex", Tier: "pro", APIKeysSHA256: []string{HashKey("k1")}},
			{ID: "initech", Tier: "starter", APIKeysSHA256: []string{"sha256:" + HashKey("k2")}},
		},
	}
}

func TestValidateNamesTheField(t *testing.T) {
	neg, inf, huge := -1.0, math.Inf(1), 2e12
	tests := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"rate", func(c *Config) { c.Tiers["pro"] = TierConfig{Rate: 0, Burst: 1} }, "tiers.pro.rate: must be > 0"},
		{"burst", func(c *Config) { c.Tiers["pro"] = TierConfig{Rate: 1, Burst: -3} }, "tiers.pro.burst: must be >= 1"},
		{"unknown tier", func(c *Config) { c.Tenants[0].Tier = "gold" }, `tenants[0] (globex).tier: unknown tier "gold" (have pro, starter)` + "\n"},
		{"misspelt tier", func(c *Config) { c.Tenants[0].Tier = "prp" }, `tenants[0] (globex).tier: unknown tier "prp" (have pro, starter); did you mean ` + "`pro`?"},
		{"duplicate tenant", func(c *Config) { c.Tenants[1].ID = "globex" }, "duplicate tenant: also tenants[0]"},
		{"duplicate key", func(c *Config) { c.Tenants[1].APIKeysSHA256 = c.Tenants[0].APIKeysSHA256 }, "duplicate key hash: also used by globex"},
		{"bad hash", func(c *Config) { c.Tenants[0].APIKeysSHA256 = []string{"demo-pro-key"} }, "tenants[0] (globex).api_keys_sha256[0]: want 64 hex digits"},
		{"bad id", func(c *Config) { c.Tenants[0].ID = "a\r\nX-Evil: 1" }, "tenants[0].id: must be 1-64 letters"},
		{"override", func(c *Config) { c.Tenants[0].Rate = &neg }, "tenants[0] (globex).rate: must be > 0"},
		{"no tiers", func(c *Config) { c.Tiers = nil; c.Tenants = nil }, "tiers: at least one tier is required"},
		// Issue 12: .inf and bursts above 1e12 passed for overrides and
		// groups (on Redis that tenant then got a permanent 503).
		{"override inf", func(c *Config) { c.Tenants[0].Burst = &inf }, "tenants[0] (globex).burst: must be >= 1 and at most 1e+12"},
		{"override huge", func(c *Config) { c.Tenants[0].Burst = &huge }, "tenants[0] (globex).burst: must be >= 1 and at most 1e+12"},
		{"group inf", func(c *Config) {
			c.Tiers["pro"] = TierConfig{Rate: 1, Burst: 10, Groups: map[string]Quota{"exports": {Rate: inf, Burst: 5}}}
		}, "tiers.pro.groups.exports.rate: must be > 0 and at most 1e+09"},
		{"group huge", func(c *Config) {
			c.Tiers["pro"] = TierConfig{Rate: 1, Burst: 10, Groups: map[string]Quota{"exports": {Rate: 1, Burst: huge}}}
		}, "tiers.pro.groups.exports.burst: must be >= 1 and at most 1e+12"},
		{"rank", func(c *Config) { c.Tiers["pro"] = TierConfig{Rate: 1, Burst: 1, Rank: 9} }, "tiers.pro.rank: must be in [0, 4]"},
		{"weight", func(c *Config) { c.Tiers["pro"] = TierConfig{Rate: 1, Burst: 1, Weight: -2} }, "tiers.pro.weight: must be in (0, 1000000]"},
		{"tenant weight", func(c *Config) { c.Tenants[0].Weight = &neg }, "tenants[0] (globex).weight: must be in (0, 1000000]"},
		{"reserve", func(c *Config) { p := -5; c.Tiers["pro"] = TierConfig{Rate: 1, Burst: 1, CriticalReservePercent: &p} }, "tiers.pro.critical_reserve_percent: must be in [0, 1000]"},
		{"limit rate and per", func(c *Config) { proLimits(c, LimitConfig{Name: "daily", Burst: 10, Rate: 1, Per: Per(time.Hour)}) }, "tiers.pro.limits[0]: set rate or per, not both"},
		{"limit without refill", func(c *Config) { proLimits(c, LimitConfig{Name: "daily", Burst: 10}) }, "tiers.pro.limits[0].rate: must be > 0"},
		{"limit per", func(c *Config) { proLimits(c, LimitConfig{Name: "daily", Burst: 10, Per: Per(time.Microsecond)}) }, "tiers.pro.limits[0].per: must be at least 1ms"},
		{"limit burst", func(c *Config) { proLimits(c, LimitConfig{Name: "daily", Burst: 0.5, Per: Per(time.Hour)}) }, "tiers.pro.limits[0].burst: must be >= 1"},
		{"limit name", func(c *Config) { proLimits(c, LimitConfig{Name: "da ily", Burst: 10, Per: Per(time.Hour)}) }, "tiers.pro.limits[0].name: must be 1-64 letters"},
		{"limit named tenant", func(c *Config) { proLimits(c, LimitConfig{Name: "tenant", Burst: 10, Per: Per(time.Hour)}) }, `tiers.pro.limits[0].name: "tenant" already names`},
		{"limit named like a group", func(c *Config) {
			c.Tiers["pro"] = TierConfig{Rate: 1, Burst: 10, Groups: map[string]Quota{"exports": {Rate: 1, Burst: 5}},
				Limits: []LimitConfig{{Name: "exports", Burst: 10, Per: Per(time.Hour)}}}
		}, `tiers.pro.limits[0].name: "exports" already names`},
		{"duplicate limit", func(c *Config) {
			proLimits(c, LimitConfig{Name: "daily", Burst: 10, Per: Per(time.Hour)}, LimitConfig{Name: "daily", Burst: 5, Rate: 1})
		}, `tiers.pro.limits[1].name: duplicate limit "daily": also tiers.pro.limits[0]`},
		{"too many limits", func(c *Config) { proLimits(c, make([]LimitConfig, MaxLimits+1)...) }, "tiers.pro.limits: 5 limits; at most 4"},
		{"tier mode", func(c *Config) { c.Tiers["pro"] = TierConfig{Rate: 1, Burst: 1, Mode: "fast"} }, `tiers.pro.mode: must be exact or sync (or absent: the store's mode), got "fast"`},
		{"limit mode", func(c *Config) {
			proLimits(c, LimitConfig{Name: "daily", Burst: 10, Per: Per(time.Hour), Mode: "Sync"})
		}, `tiers.pro.limits[0].mode: must be exact or sync`},
		{"tenant limit", func(c *Config) { c.Tenants[0].Limits = []LimitConfig{{Name: "daily", Burst: 10, Per: Per(-time.Hour)}} }, "tenants[0] (globex).limits[0].per: must be at least 1ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error()+"\n", tt.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	c := validConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
}

// proLimits sets the pro tier's limits.
func proLimits(c *Config, ls ...LimitConfig) {
	tc := c.Tiers["pro"]
	tc.Limits = ls
	c.Tiers["pro"] = tc
}

// TestLimitsAndShadowResolved: a tenant has its tier's limits, shadow
// mode and store mode unless its own entry sets them; per becomes a rate,
// and each limit keeps its own store mode.
func TestLimitsAndShadowResolved(t *testing.T) {
	c := validConfig()
	proLimits(&c, LimitConfig{Name: "daily", Burst: 86400, Per: Per(24 * time.Hour), Mode: ModeExact}, LimitConfig{Name: "per-second", Burst: 100, Rate: 20, Mode: ModeSync})
	tc := c.Tiers["pro"]
	tc.Shadow, tc.Mode = true, ModeSync
	c.Tiers["pro"] = tc
	off := false
	c.Tenants = append(c.Tenants, TenantConfig{ID: "hooli", Tier: "pro", APIKeysSHA256: []string{HashKey("k3")},
		Limits: []LimitConfig{}, Shadow: &off})
	reg, err := NewRegistry(c)
	if err != nil {
		t.Fatal(err)
	}
	globex, _ := reg.ByID("globex")
	want := []Limit{{Name: "daily", Quota: Quota{Rate: 1, Burst: 86400}, Mode: ModeExact}, {Name: "per-second", Quota: Quota{Rate: 20, Burst: 100}, Mode: ModeSync}}
	if !slices.Equal(globex.Limits, want) || !globex.Shadow || globex.Mode != ModeSync {
		t.Fatalf("globex: limits %+v shadow %v, want %+v and shadow", globex.Limits, globex.Shadow, want)
	}
	hooli, _ := reg.ByID("hooli")
	if len(hooli.Limits) != 0 || hooli.Shadow {
		t.Fatalf("hooli: limits %+v shadow %v, want none and enforced (its own entry overrides the tier)", hooli.Limits, hooli.Shadow)
	}
}

func TestRegistryLookup(t *testing.T) {
	reg, err := NewRegistry(validConfig())
	if err != nil {
		t.Fatal(err)
	}
	got, ok := reg.Lookup("k2")
	if !ok || got.ID != "initech" || got.Tier != "starter" || got.Rate != 5 || got.Burst != 25 || got.Pool != "starter" {
		t.Fatalf("Lookup(k2) = %+v, %v", got, ok)
	}
	if _, ok := reg.Lookup("k3"); ok {
		t.Fatal("an unknown key was found")
	}
	if _, ok := reg.Lookup(""); ok {
		t.Fatal("the empty key was found")
	}
}

func TestExtractKey(t *testing.T) {
	tests := []struct {
		h    http.Header
		want string
		ok   bool
	}{
		{http.Header{"Authorization": {"Bearer abc"}}, "abc", true},
		{http.Header{"Authorization": {"bearer   abc"}}, "abc", true},
		{http.Header{"X-Api-Key": {"xyz"}}, "xyz", true},
		{http.Header{"Authorization": {"Basic abc"}}, "", false},
		{http.Header{"Authorization": {"Bearer "}}, "", false},
		{http.Header{"X-Api-Key": {"a b"}}, "", false},
		{http.Header{"X-Api-Key": {"a\x00"}}, "", false},
		{http.Header{"X-Api-Key": {strings.Repeat("k", MaxKeyLen+1)}}, "", false},
		{http.Header{}, "", false},
		// Issue 12: X-API-Key was ignored whenever any Authorization was
		// present, such as Basic credentials meant for the upstream.
		{http.Header{"Authorization": {"Basic dTpw"}, "X-Api-Key": {"xyz"}}, "xyz", true},
		{http.Header{"Authorization": {"Bearer abc"}, "X-Api-Key": {"xyz"}}, "abc", true},
	}
	for _, tt := range tests {
		got, ok := ExtractKey(credsOf(tt.h))
		if got != tt.want || ok != tt.ok {
			t.Errorf("ExtractKey(%v) = %q, %v; want %q, %v", tt.h, got, ok, tt.want, tt.ok)
		}
	}
}

// TestFindKeySource: a malformed key that was presented has a source (so the
// client hears "not valid", not "missing"); Basic credentials are not ours.
func TestFindKeySource(t *testing.T) {
	for _, tt := range []struct {
		h   http.Header
		src KeySource
	}{
		{http.Header{"Authorization": {"Bearer "}}, BearerKey},
		{http.Header{"Authorization": {"Bearer"}}, BearerKey},
		{http.Header{"Authorization": {"bearer a\x01"}}, BearerKey},
		{http.Header{"X-Api-Key": {"a b"}}, HeaderKey},
		{http.Header{"X-Api-Key": {""}}, HeaderKey},
		{http.Header{"Authorization": {"Basic dTpw"}}, NoKey},
		{http.Header{"Authorization": {"Bearerx"}}, NoKey},
		{http.Header{}, NoKey},
	} {
		if _, src, ok := FindKey(credsOf(tt.h)); src != tt.src || ok {
			t.Errorf("FindKey(%q) = %v, %v; want %v, false", tt.h, src, ok, tt.src)
		}
	}
}

func FuzzExtractKey(f *testing.F) {
	f.Add("Bearer demo-pro-key", "")
	f.Add("", "demo-pro-key")
	f.Add("bEaReR \x7f", "x")
	f.Fuzz(func(t *testing.T, auth, apiKey string) {
		h := http.Header{}
		if auth != "" {
			h.Set("Authorization", auth)
		}
		if apiKey != "" {
			h.Set("X-API-Key", apiKey)
		}
		key, ok := ExtractKey(credsOf(h))
		if !ok {
			return
		}
		if key == "" || len(key) > MaxKeyLen {
			t.Fatalf("key %q accepted", key)
		}
		for i := 0; i < len(key); i++ {
			if key[i] <= ' ' || key[i] > '~' {
				t.Fatalf("key %q holds byte %#x", key, key[i])
			}
		}
	})
}

func BenchmarkLookup(b *testing.B) {
	reg, err := NewRegistry(validConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, ok := reg.Lookup("k2"); !ok {
				b.Fatal("not found")
			}
		}
	})
}

func TestWeightAndCriticalReserve(t *testing.T) {
	c := validConfig()
	two, zero := 2.0, 0
	c.Tenants[1].Weight = &two
	c.Tiers["starter"] = TierConfig{Rate: 5, Burst: 25, MaxConcurrent: 2, CriticalReservePercent: &zero}
	r, err := NewRegistry(c)
	if err != nil {
		t.Fatal(err)
	}
	globex, _ := r.ByID("globex")
	initech, _ := r.ByID("initech")
	if globex.Weight != 1 || initech.Weight != 2 {
		t.Errorf("weights %v, %v; want 1 (default) and 2 (override)", globex.Weight, initech.Weight)
	}
	// pro: max_concurrent 4, default reserve 25% = 1 more for critical.
	for _, tc := range []struct {
		t         *Tenant
		critical  bool
		instances int
		want      int
	}{
		{globex, false, 1, 4}, {globex, true, 1, 5}, {globex, false, 3, 2}, {globex, true, 3, 2},
		{initech, false, 1, 2}, {initech, true, 1, 2}, // reserve off
	} {
		if got := tc.t.CapFor(tc.critical, tc.instances); got != tc.want {
			t.Errorf("%s.CapFor(critical %v, %d instances) = %d, want %d", tc.t.ID, tc.critical, tc.instances, got, tc.want)
		}
	}
}

// credsOf is what an HTTP stack hands FindKey for a request with header h.
func credsOf(h http.Header) Credentials {
	return Credentials{Authorization: h.Get("Authorization"), APIKey: h["X-Api-Key"]}
}

// TestTierDefaults: what check-config shows per tier is what a tenant of
// the tier that overrides nothing gets from NewRegistry, and an override
// of max_concurrent carries the tier's reserve percentage with it.
func TestTierDefaults(t *testing.T) {
	c := validConfig()
	fifty, eight := 50, 8
	c.Tiers["pro"] = TierConfig{Rate: 20, Burst: 100, MaxConcurrent: 4, Rank: 1, CriticalReservePercent: &fifty,
		Limits: []LimitConfig{{Name: "daily", Burst: 86400, Per: Per(24 * time.Hour)}}}
	c.Tenants = append(c.Tenants, TenantConfig{ID: "acme", Tier: "pro", APIKeysSHA256: []string{HashKey("k3")}, MaxConcurrent: &eight})
	r, err := NewRegistry(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"globex", "initech"} {
		got, _ := r.ByID(id)
		want := c.Tiers[got.Tier].Defaults(got.Tier)
		want.ID = id
		if diff := cmp.Diff(want, *got); diff != "" {
			t.Errorf("%s differs from its tier's defaults (-want +got):\n%s", id, diff)
		}
	}
	d := c.Tiers["pro"].Defaults("pro")
	if d.Pool != "pro" || d.Weight != 1 || d.CriticalReserve != 2 || len(d.Limits) != 1 || d.Limits[0].Rate != 1 {
		t.Errorf("pro's defaults = %+v, want pool pro, weight 1, reserve 2 (50%% of 4), daily at 1 a second", d)
	}
	if s := c.Tiers["starter"].Defaults("starter"); s.CriticalReserve != 0 {
		t.Errorf("starter (no cap) has a reserve of %d", s.CriticalReserve)
	}
	// Negative control: an override differs from the defaults, and its
	// reserve follows its own cap (50% of 8), not the tier's.
	acme, _ := r.ByID("acme")
	if acme.MaxConcurrent != 8 || acme.CriticalReserve != 4 {
		t.Errorf("acme: max_concurrent %d (+%d), want 8 (+4)", acme.MaxConcurrent, acme.CriticalReserve)
	}
}
