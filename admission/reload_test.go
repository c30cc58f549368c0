package admission

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/admission/redisstore"
	"github.com/fairgate/fairgate/internal/fakeclock"
	"github.com/fairgate/fairgate/internal/redistest"
)

// TestReloadDoesNotRefill (issue 12): a reload that lowered a rate brought a
// just-emptied bucket back full, because the embedded store forgot it at
// the instant it would have been full under the old rate.
func TestReloadDoesNotRefill(t *testing.T) {
	clk := fakeclock.New()
	g, err := New(testConfig(), testRegistry(t), Options{Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	for range 25 { // initech's whole burst of 25 at 5 tokens/s
		mustCheck(t, g, req("start-key", "GET", "/api/v1/users/me"))
	}
	slower := testRegistryStarterRate(t, 0.5)
	if err := g.Reload(context.Background(), testConfig(), slower); err != nil {
		t.Fatal(err)
	}
	clk.Advance(6 * time.Second) // past the old full instant (5 s), a sweep due
	d := mustCheck(t, g, req("start-key", "GET", "/api/v1/users/me"))
	if got, want := d.Quotas[0].Remaining, 2.0; !d.Allowed || got != want {
		t.Fatalf("after the reload: allowed %v, %v tokens left; want true, %v (3 refilled at 0.5/s, 1 taken)", d.Allowed, got, want)
	}
}

// TestReloadDoesNotRefillRedis: the same on the shared store, whose keys
// expire when their bucket is full at the rate of the last take. Redis's
// clock decides (TIME), so the rates are fast enough for a real wait:
// initech's burst of 25 is full again 50 ms after it is emptied at 500/s,
// but 50 s after at 0.5/s.
func TestReloadDoesNotRefillRedis(t *testing.T) {
	store, _ := newRedisStore(t, redisstore.Config{FailurePolicy: redisstore.FailClosed, DenyCacheSize: -1})
	g, err := New(testConfig(), testRegistryStarterRate(t, 500), Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	check := func() Decision {
		t.Helper()
		d, err := g.Check(context.Background(), req("start-key", "GET", "/api/v1/users/me"))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// Empty: 25 takes, and what 500/s refilled meanwhile.
	for i := 0; check().Allowed; i++ {
		if i > 1000 {
			t.Fatal("the bucket never emptied")
		}
	}
	if err := g.Reload(context.Background(), testConfig(), testRegistryStarterRate(t, 0.5)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // past the old full instant
	if d := check(); d.Quotas[0].Remaining > 2 {
		t.Fatalf("after the reload: allowed %v, %v tokens left; want < 2 (less than a token, and 0.05 refilled at 0.5/s)", d.Allowed, d.Quotas[0].Remaining)
	}
}

// TestReloadRedisDown: a reload whose relimit Redis cannot take still
// applies the new quotas, and says what it could not do.
func TestReloadRedisDown(t *testing.T) {
	store, srv := newRedisStore(t, redisstore.Config{})
	var log bytes.Buffer
	g, err := New(testConfig(), testRegistryStarterRate(t, 5), Options{Store: store, Logger: slog.New(slog.NewTextHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if err := g.Reload(context.Background(), testConfig(), testRegistryStarterRate(t, 0.5)); err != nil {
		t.Fatalf("Reload: %v; want the new config in force", err)
	}
	if tn, _ := g.cfg.Load().reg.ByID("initech"); tn.Rate != 0.5 {
		t.Errorf("rate after the reload: %v, want 0.5", tn.Rate)
	}
	if !strings.Contains(log.String(), "may come back full early") {
		t.Errorf("log %q: want a warning about the buckets not relimited", log.String())
	}
}

// backstopRecorder is an embedded store that records the global
// backstop's relimits.
type backstopRecorder struct {
	*ratelimit.MemoryStore
	relimits []ratelimit.BackstopLimit
}

func (r *backstopRecorder) RelimitBackstop(_ context.Context, l ratelimit.BackstopLimit) error {
	r.relimits = append(r.relimits, l)
	return nil
}

// TestReloadRelimitsBackstop: a reload that lowers the global rate tells a
// store whose backstop expires; one that raises it does not.
func TestReloadRelimitsBackstop(t *testing.T) {
	store := &backstopRecorder{MemoryStore: ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{})}
	withGlobal := func(rate float64) Config {
		cfg := testConfig()
		cfg.Global = &GlobalConfig{Rate: rate, Burst: 100}
		return cfg
	}
	g, err := New(withGlobal(100), testRegistry(t), Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	for _, rate := range []float64{10, 50} {
		if err := g.Reload(context.Background(), withGlobal(rate), testRegistry(t)); err != nil {
			t.Fatal(err)
		}
	}
	want := []ratelimit.BackstopLimit{{Rate: 10, Burst: 100, Window: DefaultGlobalWindow}}
	if !slices.Equal(store.relimits, want) {
		t.Errorf("backstop relimits %v, want %v", store.relimits, want)
	}
}

// newRedisStore starts a redis-server and returns it and a Store on it with
// cfg (its Addrs set, and a Timeout of 1s unless set: these tests are about
// the answers, not deadlines), closed when t ends.
func newRedisStore(t *testing.T, cfg redisstore.Config) (*redisstore.Store, *redistest.Server) {
	t.Helper()
	srv := redistest.StartServer(t)
	return redisStoreOn(t, srv, cfg), srv
}

// redisStoreOn is a store of config cfg on the running srv, closed when t
// ends; several of them are instances sharing one Redis.
func redisStoreOn(t *testing.T, srv *redistest.Server, cfg redisstore.Config) *redisstore.Store {
	t.Helper()
	return redisStoreAt(t, srv.Addr(), cfg)
}

// redisStoreAt is redisStoreOn for the Redis at addr.
func redisStoreAt(t *testing.T, addr string, cfg redisstore.Config) *redisstore.Store {
	t.Helper()
	cfg.Addrs = []string{addr}
	if cfg.Timeout == 0 {
		cfg.Timeout = time.Second
	}
	client, err := redisstore.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	store, err := redisstore.New(client, cfg, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// TestLaterFull: the buckets a reload must relimit in a shared store are
// those whose new limit is full later: a lower rate or a larger burst.
func TestLaterFull(t *testing.T) {
	compile := func(rate float64) *compiled {
		t.Helper()
		cfg := testConfig()
		c, err := cfg.compile(testRegistryStarterRate(t, rate))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	initech := ratelimit.BucketKey{Tenant: "initech"}
	for _, tc := range []struct {
		from, to float64
		want     map[ratelimit.BucketKey]ratelimit.Limit
	}{
		{5, 0.5, map[ratelimit.BucketKey]ratelimit.Limit{initech: {Rate: 0.5, Burst: 25}}},
		{5, 50, map[ratelimit.BucketKey]ratelimit.Limit{}},
		{5, 5, map[ratelimit.BucketKey]ratelimit.Limit{}},
	} {
		if got := compile(tc.to).laterFull(compile(tc.from)); !maps.Equal(got, tc.want) {
			t.Errorf("starter rate %v → %v: got %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
}
