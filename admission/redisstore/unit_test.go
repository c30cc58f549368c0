package redisstore

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

func TestConfigYAML(t *testing.T) {
	const doc = `
addrs: [10.0.0.1:6379, 10.0.0.2:6379, 10.0.0.3:6379]
cluster: true
username: fairgate
password: secret
tls: {enabled: true, server_name: redis.internal}
pool_size: 32
timeout: 5ms
failure_policy: fail_closed
instances: 4
breaker: {failures: 5, open_for: 2s}
batch: {disabled: false, max_in_flight: 4}
deny_cache_size: 100000
log_every: 30s
`
	var c Config
	if err := yaml.Unmarshal([]byte(doc), &c); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if c.FailurePolicy != FailClosed || c.Timeout != 5*time.Millisecond || c.Breaker.OpenFor != 2*time.Second || !c.TLS.Enabled {
		t.Errorf("got %+v", c)
	}
	if err := yaml.Unmarshal([]byte("failure_policy: fail_sometimes"), &c); err == nil || !strings.Contains(err.Error(), "fail_sometimes") {
		t.Errorf("unknown policy: got %v, want an error naming it", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		c    Config
		want []string // substrings of the error; none means valid
	}{
		{"minimal", Config{Addrs: []string{"x:1"}}, nil},
		{"no addrs", Config{}, []string{"redis.addrs: at least one"}},
		{"many addrs, no mode", Config{Addrs: []string{"a:1", "b:1"}}, []string{"redis.addrs: 2 addresses need cluster"}},
		{"sentinel", Config{Addrs: []string{"a:1", "b:1"}, MasterName: "m"}, nil},
		{"negatives", Config{Addrs: []string{"a:1"}, Timeout: -1, Instances: -1, PoolSize: -1, DB: -1,
			Breaker: BreakerConfig{Failures: -1, OpenFor: -1}, Batch: BatchConfig{MaxInFlight: -1}},
			[]string{"redis.timeout: must be > 0", "redis.instances", "redis.pool_size", "redis.db", "redis.breaker.failures", "redis.breaker.open_for", "redis.batch.max_in_flight"}},
		{"cluster db", Config{Addrs: []string{"a:1"}, Cluster: true, DB: 2}, []string{"redis.db: must be 0 with cluster"}},
		{"bad policy", Config{Addrs: []string{"a:1"}, FailurePolicy: 9}, []string{"redis.failure_policy"}},
		{"batching", Config{Addrs: []string{"a:1"}, PoolSize: 4, QueueTimeout: -1, Batch: BatchConfig{MaxInFlight: 8, MaxBatch: -1}},
			[]string{"redis.batch.max_in_flight: 8 pipelines in flight need as many connections; pool_size is 4", "redis.batch.max_batch", "redis.queue_timeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want errors %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate() = %v\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

func TestFailurePolicyText(t *testing.T) {
	for _, p := range []FailurePolicy{Local, FailOpen, FailClosed} {
		b, _ := p.MarshalText()
		var got FailurePolicy
		if err := got.UnmarshalText(b); err != nil || got != p {
			t.Errorf("round trip %v: got %v, %v", p, got, err)
		}
	}
}

// hostileTenants are IDs that try to break out of the hash tag or collide.
var hostileTenants = []string{
	"a", "b", "a}", "{a", "a}:x", "}{", "{}", "", ":", "*", "a\nb", "a\x00b",
	"a:b", "fg:{a}:", strings.Repeat("{", 3000), strings.Repeat("x", 4096),
}

func TestBucketKeyTagAndCollisions(t *testing.T) {
	scopes := []string{"", "export", "a}", "{b}", ":", "x\ny", strings.Repeat("s", 64), strings.Repeat("s", 65), "#", "*"}
	seen := map[string]ratelimit.BucketKey{}
	for _, tn := range hostileTenants {
		for _, sc := range scopes {
			k := ratelimit.BucketKey{Tenant: tn, Scope: sc}
			key := bucketKey(k)
			if prev, dup := seen[key]; dup {
				t.Fatalf("bucketKey(%.40q) = bucketKey(%.40q) = %q", k, prev, key)
			}
			seen[key] = k
			if got, want := hashTag(key), bucketKey(ratelimit.BucketKey{Tenant: tn}); "fg:{"+got+"}:" != want {
				t.Errorf("tag of %.40q = %q; want the tenant's own tag (%q)", key, got, want)
			}
			if len(key) > len("fg:{}:")+32+maxPlainScope {
				t.Errorf("key for %.40q is %d bytes long", k, len(key))
			}
		}
	}
}

// FuzzBucketKey checks that distinct bucket keys map to distinct Redis keys
// and that the hash tag is always the tenant's.
func FuzzBucketKey(f *testing.F) {
	f.Add("a}", "b", "a", "}b")
	f.Add("", "x", "g", "x")
	f.Fuzz(func(t *testing.T, t1, s1, t2, s2 string) {
		k1, k2 := ratelimit.BucketKey{Tenant: t1, Scope: s1}, ratelimit.BucketKey{Tenant: t2, Scope: s2}
		a, b := bucketKey(k1), bucketKey(k2)
		if (a == b) != (k1 == k2) {
			t.Fatalf("bucketKey(%q) = %q, bucketKey(%q) = %q", k1, a, k2, b)
		}
		if (hashTag(a) == hashTag(b)) != (t1 == t2) {
			t.Fatalf("tags of %q and %q: %q, %q", k1, k2, hashTag(a), hashTag(b))
		}
	})
}

// hashTag is what Redis Cluster hashes: the bytes between the first '{' and
// the first '}' after it.
func hashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

func TestDecodeTakeRejectsBadShapes(t *testing.T) {
	one := []ratelimit.Take{{Limit: ratelimit.Limit{Rate: 1, Burst: 4}, Cost: 1}}
	res := make([]ratelimit.Result, 1)
	for _, v := range []any{
		nil, "x", []any{}, []any{int64(1), dbl(1)}, []any{"1", dbl(1), int64(1)},
		[]any{int64(2), dbl(1), int64(1)}, []any{int64(1), int64(1), int64(1)}, []any{int64(1), "1", int64(1)},
		[]any{int64(1), dbl(math.NaN()), int64(1)}, []any{int64(1), dbl(1), "1"},
		[]any{int64(1), dbl(1), dbl(1), int64(1)},
	} {
		if _, err := decodeTake(v, one, res); !errors.Is(err, errBadReply) {
			t.Errorf("decodeTake(%#v) = %v, want errBadReply", v, err)
		}
	}
	if now, err := decodeTake([]any{int64(1), dbl(2.5), int64(7)}, one, res); err != nil || now != 7 ||
		res[0] != (ratelimit.Result{Allowed: true, Remaining: 2.5, ResetAfter: 1500 * time.Millisecond}) {
		t.Errorf("decodeTake(good) = %+v, %v, %v", res[0], now, err)
	}
	two := append(one, ratelimit.Take{Limit: ratelimit.Limit{Rate: 2, Burst: 2}, Cost: 2})
	res = make([]ratelimit.Result, 2)
	if _, err := decodeTake([]any{int64(0), dbl(3), dbl(1), int64(7)}, two, res); err != nil ||
		res[0].RetryAfter != 0 || res[1].RetryAfter != 500*time.Millisecond || res[0].Allowed || res[1].Allowed {
		t.Errorf("decodeTake(refused pair) = %+v, %v", res, err)
	}
}

// dbl is f as the scripts return it: struct.pack '<d'.
func dbl(f float64) string {
	return string(binary.LittleEndian.AppendUint64(nil, math.Float64bits(f)))
}

// put1, get1 and settle1 are the denial cache's methods for one take.
func (c *denyCache) put1(k ratelimit.BucketKey, l ratelimit.Limit, cost float64, r ratelimit.Result, now time.Time) {
	takes := []ratelimit.Take{{Key: k, Limit: l, Cost: cost}}
	c.put(denyKeyOf(takes), takes, []ratelimit.Result{r}, now)
}

func (c *denyCache) get1(k ratelimit.BucketKey, l ratelimit.Limit, cost float64, now time.Time) (ratelimit.Result, denyState, <-chan struct{}) {
	res := make([]ratelimit.Result, 1)
	st, wait := c.get(denyKeyOf([]ratelimit.Take{{Key: k, Limit: l, Cost: cost}}), now, res)
	return res[0], st, wait
}

func (c *denyCache) settle1(k ratelimit.BucketKey, l ratelimit.Limit, cost float64, r ratelimit.Result, ok bool, now time.Time) {
	takes := []ratelimit.Take{{Key: k, Limit: l, Cost: cost}}
	c.settle(denyKeyOf(takes), takes, []ratelimit.Result{r}, ok, now)
}

func TestDenyCacheBoundedAndExpires(t *testing.T) {
	c := newDenyCache(64)
	now := time.Unix(1000, 0)
	deny := ratelimit.Result{RetryAfter: time.Second, ResetAfter: 2 * time.Second, Remaining: 0.5}
	lim := ratelimit.Limit{Rate: 5, Burst: 25}
	for i := range 1000 {
		c.put1(ratelimit.BucketKey{Tenant: string(rune('a' + i%26)), Scope: strings.Repeat("x", i)}, lim, 1, deny, now)
	}
	if n := c.len(); n > 64 {
		t.Errorf("len = %d, want <= 64", n)
	}
	k := ratelimit.BucketKey{Tenant: "t"}
	c.put1(k, lim, 1, deny, now)
	hit := func(l ratelimit.Limit, cost float64, at time.Time) (ratelimit.Result, bool) {
		r, st, _ := c.get1(k, l, cost, at)
		return r, st == denyHit
	}
	r, ok := hit(lim, 1, now.Add(400*time.Millisecond))
	// Only the wait is known: the bucket was not read, so a remembered
	// Remaining would be stale (issue 12).
	if !ok || r.Allowed || r.RetryAfter != 600*time.Millisecond || !r.StateUnknown || r.Remaining != 0 || r.ResetAfter != 0 {
		t.Errorf("get before expiry = %+v, %v; want RetryAfter 600ms and the state unknown", r, ok)
	}
	if _, ok := hit(lim, 2, now); ok {
		t.Error("get with another cost hit")
	}
	if _, ok := hit(ratelimit.Limit{Rate: lim.Rate * 2, Burst: lim.Burst}, 1, now); ok {
		t.Fatal("a denial decided under the old limit answered for a new one (reload)")
	}
	if _, ok := hit(lim, 1, now.Add(time.Second)); ok {
		t.Error("get at expiry hit")
	}
}

// TestDenyCacheSingleFlight: when a denial expires, the first caller
// refreshes it and the others wait; a new denial answers them, while an
// admission (tokens are not shared) or a failure sends them to Redis.
func TestDenyCacheSingleFlight(t *testing.T) {
	c := newDenyCache(64)
	now := time.Unix(1000, 0)
	lim := ratelimit.Limit{Rate: 5, Burst: 25}
	deny := ratelimit.Result{RetryAfter: time.Second, ResetAfter: 2 * time.Second}
	k := ratelimit.BucketKey{Tenant: "t"}
	c.put1(k, lim, 1, deny, now)
	at := now.Add(time.Second)
	if _, st, _ := c.get1(k, lim, 1, at); st != denyLead {
		t.Fatalf("first get after expiry: %v, want denyLead", st)
	}
	_, st, wait := c.get1(k, lim, 1, at)
	if st != denyWait || wait == nil {
		t.Fatalf("second get during the refresh: %v, want denyWait", st)
	}
	select {
	case <-wait:
		t.Fatal("woken before the refresh settled")
	default:
	}
	c.settle1(k, lim, 1, deny, true, at) // denied again
	<-wait
	if r, st, _ := c.get1(k, lim, 1, at.Add(time.Millisecond)); st != denyHit || r.RetryAfter != 999*time.Millisecond {
		t.Fatalf("after a denial settled: %v %+v, want the new denial", st, r)
	}
	for _, tc := range []struct {
		name  string
		r     ratelimit.Result
		ok    bool
		state denyState
		retry time.Duration
	}{
		// The refresher took the last token: the next take of 1 waits
		// 1/5 s for the refill, and the waiters are denied until then.
		{"admitted, bucket empty", ratelimit.Result{Allowed: true, Remaining: 0}, true, denyHit, 200 * time.Millisecond},
		// Tokens left: each waiter takes its own from Redis.
		{"admitted, tokens left", ratelimit.Result{Allowed: true, Remaining: 3}, true, denyMiss, 0},
		{"no answer", ratelimit.Result{}, false, denyMiss, 0},
	} {
		at = at.Add(time.Second)
		c.put1(k, lim, 1, deny, at.Add(-time.Second))
		if _, st, _ := c.get1(k, lim, 1, at); st != denyLead {
			t.Fatalf("%s: get after expiry: %v, want denyLead", tc.name, st)
		}
		_, _, wait := c.get1(k, lim, 1, at)
		c.settle1(k, lim, 1, tc.r, tc.ok, at)
		<-wait
		if r, st, _ := c.get1(k, lim, 1, at); st != tc.state || r.RetryAfter != tc.retry {
			t.Errorf("%s: then get = %v %+v, want %v with RetryAfter %v", tc.name, st, r, tc.state, tc.retry)
		}
	}
}

func TestLocalShare(t *testing.T) {
	l := ratelimit.Limit{Rate: 30, Burst: 12}
	if got := localShare(l, 1, 3); got != (ratelimit.Limit{Rate: 10, Burst: 4}) {
		t.Errorf("share of %v/3 = %v", l, got)
	}
	if got := localShare(l, 6, 3); got.Burst != 6 {
		t.Errorf("burst for cost 6 = %v, want 6 (a cost the quota admits stays admissible)", got.Burst)
	}
}

func TestLogLimiter(t *testing.T) {
	l := logLimiter{every: int64(time.Second)}
	var logged []int64
	for i := range 100 {
		if n, ok := l.allow(int64(i) * int64(50*time.Millisecond)); ok {
			logged = append(logged, n)
		}
	}
	// 100 events over 5s, one line a second.
	if len(logged) != 5 || logged[0] != 1 || logged[1] != 20 {
		t.Errorf("logged counts = %v, want 5 lines: 1, 20, 20, ...", logged)
	}
}
