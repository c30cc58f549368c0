package admission

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fairgate/fairgate/tenant"
)

// rendering is a rejection's header fields, status and body.
type rendering struct {
	fields []string
	status int
	body   string
}

func (r rendering) String() string { return fmt.Sprintf("%d %q %s", r.status, r.fields, r.body) }

// render renders d as reject does with buf, or, with buf nil, fresh
// (setRateLimitHeaders and answer, as before the cache).
func render(buf *rejectBuffer, d *Decision, reqID string) rendering {
	var r rendering
	set := func(key string, v []byte) { r.fields = append(r.fields, key+": "+string(v)) }
	var body []byte
	if buf != nil {
		r.status, body = buf.reject(d, reqID, set)
	} else {
		fresh := rejectBuffers.New().(*rejectBuffer)
		fresh.msg = setRateLimitHeaders(d, fresh.msg[:0], set)
		r.status, body = fresh.answer(d.Reason, d.RetryAfter, reqID, msgArgs{d.Tenant, d.Route, d.detail}, set)
	}
	r.body = string(body)
	return r
}

// TestRejectReplaysOnlyTheSame: a rejection answered from the buffer's
// last rendering is byte for byte the fresh one, whatever changed between
// two rejections (each input the rendering reads is changed alone in
// turn, so a key that missed one would replay a stale answer and fail
// here), and
// two rejections alike but for their request IDs differ only there.
func TestRejectReplaysOnlyTheSame(t *testing.T) {
	reg, err := tenant.NewRegistry(tenant.Config{
		Tiers: map[string]tenant.TierConfig{"free": {Rate: 0.5, Burst: 40, Groups: map[string]tenant.Quota{"exports": {Rate: 0.1, Burst: 20}}}},
		Tenants: []tenant.TenantConfig{
			{ID: "noisy", Tier: "free", APIKeysSHA256: []string{tenant.HashKey("k1")}},
			{ID: "other", Tier: "free", APIKeysSHA256: []string{tenant.HashKey("k2")}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(testConfig(), reg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rejected := func(key, method, path string) Decision {
		t.Helper()
		for range 100 {
			if d := mustCheck(t, g, req(key, method, path)); !d.Allowed {
				return d
			}
		}
		t.Fatalf("%s %s with %s was never rejected", method, path, key)
		return Decision{}
	}
	base := rejected("k1", "GET", "/api/v1/users/me")
	if base.NQuotas == 0 || base.Reason != ReasonTenantQuota {
		t.Fatalf("base decision %v with %d quotas, want a tenant quota rejection", base.Reason, base.NQuotas)
	}
	export := rejected("k1", "POST", "/api/v1/reports/export")
	twoQuotas := func(wait time.Duration) Decision {
		d := base
		d.Quotas[d.NQuotas] = QuotaState{Name: "second", Limit: 9, Window: time.Second, Wait: wait}
		d.NQuotas++
		return d
	}
	malformed := func(detail string) Decision { d := base; d.Reason, d.detail = ReasonMalformedBody, detail; return d }
	// Each change is a pair that differs in one input alone.
	changes := []struct {
		name     string
		from, to Decision
	}{
		{"same", base, base},
		{"retry after", base, func() Decision { d := base; d.RetryAfter += 3 * time.Second; return d }()},
		{"remaining", base, func() Decision { d := base; d.Quotas[0].Remaining++; return d }()},
		{"reset", base, func() Decision { d := base; d.Quotas[0].Reset += 2 * time.Second; return d }()},
		{"limit", base, func() Decision { d := base; d.Quotas[0].Limit++; return d }()},
		{"window", base, func() Decision { d := base; d.Quotas[0].Window += 5 * time.Second; return d }()},
		{"quota name", base, func() Decision { d := base; d.Quotas[0].Name = "other"; return d }()},
		{"quotas", base, twoQuotas(time.Hour)},
		{"tightest", twoQuotas(time.Hour), twoQuotas(0)},
		{"tenant", base, rejected("k2", "GET", "/api/v1/users/me")},
		{"route", base, func() Decision { d := base; d.Route = export.Route; return d }()},
		{"another route", base, export},
		{"reason", base, func() Decision { d := base; d.Reason = ReasonMaxConcurrent; return d }()},
		{"detail", malformed("one"), malformed("two")},
		{"no credential", base, mustCheck(t, g, req("", "GET", "/api/v1/users/me"))},
	}
	buf := rejectBuffers.New().(*rejectBuffer)
	for i, c := range changes {
		for k, d := range []Decision{c.from, c.to} {
			for j, id := range []string{fmt.Sprintf("%016x", 2*i+k), `a"quote`, fmt.Sprintf("%016x", 100+2*i+k)} {
				got, want := render(buf, &d, id), render(nil, &d, id)
				if got.String() != want.String() {
					t.Errorf("%s (%d), request %d:\n got %s\nwant %s", c.name, k, j, got, want)
				}
			}
		}
	}
	a, b := render(buf, &base, "0000000000000001"), render(buf, &base, "0000000000000002")
	if !slices.Equal(a.fields, b.fields) || a.body == b.body {
		t.Errorf("two rejections alike but for their IDs:\n%s\n%s", a, b)
	}
}

// BenchmarkReject is a flood's rejection rendered from the last one (the
// same answer but for its request ID) and fresh.
func BenchmarkReject(b *testing.B) {
	g := floodGate(b)
	r := req("flood-key", "GET", "/api/v1/users/me")
	g.check(context.Background(), r)
	d, _ := g.check(context.Background(), r)
	if d.Allowed {
		b.Fatal("the flood was admitted")
	}
	n := 0
	set := func(key string, v []byte) { n += len(v) }
	buf := rejectBuffers.New().(*rejectBuffer)
	b.Run("replayed", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf.reject(&d, "38b098529c57a1d9", set)
		}
	})
	b.Run("fresh", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf.msg = setRateLimitHeaders(&d, buf.msg[:0], set)
			buf.answer(d.Reason, d.RetryAfter, "38b098529c57a1d9", msgArgs{d.Tenant, d.Route, d.detail}, set)
		}
	})
}
