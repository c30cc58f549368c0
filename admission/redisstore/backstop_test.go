package redisstore

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/fairshare"
	"github.com/fairgate/fairgate/internal/redistest"
)

// TestBackstopMatchesReference runs a sequence of takes by several tenants
// through backstop.lua and, at the very instants the script read from
// Redis's clock, through fairshare.Backstop: every decision must be the
// same, and the figures equal to rounding.
func TestBackstopMatchesReference(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.Batch.Disabled, c.Timeout, c.BackstopMode = true, time.Second, BackstopExact }, Options{})
	ctx := context.Background()
	l := fairshare.BackstopLimit{Rate: 200, Burst: 40, Window: 200 * time.Millisecond}
	var ref fairshare.Backstop
	type step struct {
		tenant       string
		weight, cost float64
		class        fairshare.Class
	}
	// heavy floods with cost 1; two others ask now and then with larger
	// costs. (The script runs thousands of times a second here, far above
	// the rate: this checks the arithmetic, not who is light.)
	var steps []step
	for i := range 600 {
		steps = append(steps, step{"heavy", 1, 1, fairshare.Class(i % 3)})
		if i%15 == 0 {
			steps = append(steps, step{"light", 2, 5, fairshare.Critical})
		}
		if i%40 == 0 {
			steps = append(steps, step{"other", 1, 10, fairshare.Sheddable})
		}
	}
	refused := 0
	close := func(a, b float64) bool { return math.Abs(a-b) <= 1e-6*max(1, math.Abs(b)) }
	seen := map[string]bool{}
	for i, st := range steps {
		if !seen[st.tenant] && i > 0 {
			// A tenant's first call recomputes the level (the last was
			// longer ago than LevelEvery): it must count itself.
			time.Sleep(l.Window/fairshare.LevelEvery + time.Millisecond)
		}
		seen[st.tenant] = true
		r := fairshare.BackstopRequest{Tenant: st.tenant, Weight: st.weight, Cost: st.cost, Class: st.class}
		got, nowUS, err := s.evalBackstop(ctx, l, r)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		want := ref.Take(nowUS*1000, l, r)
		if got.Allowed != want.Allowed || got.WithinShare != want.WithinShare ||
			!close(got.Use, want.Use) || !close(got.Share, want.Share) || !close(got.Tokens, want.Tokens) ||
			(got.RetryAfter-want.RetryAfter).Abs() > time.Microsecond {
			t.Fatalf("step %d (%+v) at %dµs:\n got %+v\nwant %+v", i, st, nowUS, got, want)
		}
		if !got.Allowed {
			refused++
		}
	}
	if refused == 0 {
		t.Error("nothing was refused; the sequence tests nothing")
	}
}

// TestBackstopSharedByInstances: three instances on one Redis keep one
// fair backstop: a heavy tenant flooding through all three is held to
// about the rate, and a light tenant asking through one of them is never
// refused. Negative control: the first-come global bucket it replaced
// refuses the light tenant.
func TestBackstopSharedByInstances(t *testing.T) {
	srv := redistest.StartServer(t)
	edit := func(c *Config) { c.Timeout, c.FailurePolicy, c.BackstopMode = time.Second, FailClosed, BackstopExact }
	var stores []*Store
	for range 3 {
		stores = append(stores, newTestStore(t, []string{srv.Addr()}, edit, Options{}))
	}
	l := fairshare.BackstopLimit{Rate: 100, Burst: 50, Window: 200 * time.Millisecond}
	fair := func(st *Store, tenant string) (bool, error) {
		r, err := st.TakeBackstop(context.Background(), l, fairshare.BackstopRequest{Tenant: tenant, Weight: 1, Cost: 1})
		return r.Allowed, err
	}
	heavy, light, refused, elapsed := squeeze(t, stores, fair)
	// The bucket's bound: burst, the reserve, and the rate.
	if ceiling := 2*l.Burst + l.Rate*elapsed.Seconds() + 1; float64(heavy+light) > ceiling {
		t.Errorf("admitted %d + %d tokens in %v, want ≤ %.0f", heavy, light, elapsed, ceiling)
	}
	if refused > 0 || light == 0 {
		t.Errorf("light tenant: %d admitted, %d refused; want none refused", light, refused)
	}

	firstComeControl(t, stores, l)
}

// firstComeControl is the negative control of the backstop's tests: a
// first-come bucket of l in the stores, squeezed, refuses the light
// tenant.
func firstComeControl(t *testing.T, stores []*Store, l fairshare.BackstopLimit) {
	t.Helper()
	firstCome := func(st *Store, tenant string) (bool, error) {
		r, err := st.Take(context.Background(), ratelimit.BucketKey{Scope: "first-come"}, limitOf(l), 1)
		return r.Allowed, err
	}
	if _, light, refused, _ := squeeze(t, stores, firstCome); refused == 0 {
		t.Errorf("negative control: the first-come bucket refused none of the light tenant's %d requests", light)
	}
}

// squeeze runs a heavy tenant flooding through every store (six callers) and a light
// one (20 requests a second) through the first, for 600 ms, and reports
// what each was admitted and how often the light one was refused.
func squeeze(t *testing.T, stores []*Store, take func(st *Store, tenant string) (bool, error)) (heavy, light, refusedLight int, elapsed time.Duration) {
	const d = 600 * time.Millisecond
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for w := range 6 {
		wg.Go(func() {
			for time.Since(start) < d {
				ok, err := take(stores[w%len(stores)], "heavy")
				if err != nil {
					t.Errorf("heavy: %v", err)
					return
				}
				if ok {
					mu.Lock()
					heavy++
					mu.Unlock()
				}
				// Paced like requests (still a hundred times the rate):
				// six goroutines spinning on two cores would starve the
				// rest, sync mode's reconciliation among it.
				time.Sleep(100 * time.Microsecond)
			}
		})
	}
	wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for time.Since(start) < d {
			<-tick.C
			ok, err := take(stores[0], "light")
			if err != nil {
				t.Errorf("light: %v", err)
				return
			}
			mu.Lock()
			if ok {
				light++
			} else {
				refusedLight++
			}
			mu.Unlock()
		}
	})
	wg.Wait()
	return heavy, light, refusedLight, time.Since(start)
}

// TestBackstopKeyLivesUntilFull: the backstop's key expired 10 windows
// after the last call even when the bucket was far from full then, and a
// missing key is a full bucket. It now lives until the bucket is full at
// the call's rate, and no later call shortens that.
func TestBackstopKeyLivesUntilFull(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.Timeout, c.FailurePolicy, c.BackstopMode = time.Second, FailClosed, BackstopExact }, Options{})
	ctx := context.Background()
	take := func(l fairshare.BackstopLimit) {
		t.Helper()
		if r, err := s.TakeBackstop(ctx, l, fairshare.BackstopRequest{Tenant: "a", Weight: 1, Cost: 50}); err != nil || !r.Allowed {
			t.Fatalf("TakeBackstop: %+v, %v", r, err)
		}
	}
	ttl := func() time.Duration {
		t.Helper()
		d, err := s.client.PTTL(ctx, backstopKey).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	slow := fairshare.BackstopLimit{Rate: 1, Burst: 100, Window: 100 * time.Millisecond}
	take(slow) // 50 tokens left: full in 50 s, 10 windows are 1 s
	if got := ttl(); got < 49*time.Second {
		t.Errorf("PTTL %v, want about 50s (full at 1/s)", got)
	}
	take(fairshare.BackstopLimit{Rate: 1000, Burst: 100, Window: 100 * time.Millisecond})
	if got := ttl(); got < 49*time.Second {
		t.Errorf("PTTL %v after a call at a higher rate, want still about 50s", got)
	}
}

// TestRelimitBackstop: a reload that lowers the global rate moves the
// backstop's expiry to the instant its bucket is full at the new rate;
// without it the hash would vanish when full at the old one, and come
// back full.
func TestRelimitBackstop(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newTestStore(t, []string{srv.Addr()}, func(c *Config) { c.Timeout, c.FailurePolicy, c.BackstopMode = time.Second, FailClosed, BackstopExact }, Options{})
	ctx := context.Background()
	fast := fairshare.BackstopLimit{Rate: 1000, Burst: 100, Window: 100 * time.Millisecond}
	if r, err := s.TakeBackstop(ctx, fast, fairshare.BackstopRequest{Tenant: "a", Weight: 1, Cost: 50}); err != nil || !r.Allowed {
		t.Fatalf("TakeBackstop: %+v, %v", r, err)
	}
	if err := s.RelimitBackstop(ctx, fairshare.BackstopLimit{Rate: 1, Burst: 100, Window: fast.Window}); err != nil {
		t.Fatal(err)
	}
	if got, err := s.client.PTTL(ctx, backstopKey).Result(); err != nil || got < 45*time.Second {
		t.Errorf("PTTL %v (%v) after the reload, want about 50s (full at 1/s)", got, err)
	}
	// A request still decided under the old limit does not shorten it.
	if r, err := s.TakeBackstop(ctx, fast, fairshare.BackstopRequest{Tenant: "a", Weight: 1, Cost: 1}); err != nil || !r.Allowed {
		t.Fatalf("TakeBackstop after the relimit: %+v, %v", r, err)
	}
	if got, err := s.client.PTTL(ctx, backstopKey).Result(); err != nil || got < 45*time.Second {
		t.Errorf("PTTL %v (%v) after a late request under the old limit, want still about 50s", got, err)
	}
	// A hash that does not exist stays so.
	if err := s.client.Del(ctx, backstopKey).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.RelimitBackstop(ctx, fast); err != nil {
		t.Fatal(err)
	}
	if n, err := s.client.Exists(ctx, backstopKey).Result(); err != nil || n != 0 {
		t.Errorf("EXISTS = %d, %v after relimiting no backstop; want 0", n, err)
	}
}
