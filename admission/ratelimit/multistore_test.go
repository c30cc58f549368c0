package ratelimit

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// refBuckets is the reference model of TakeAll: a map of buckets, each
// refilled and charged by the plainest arithmetic, all or nothing.
type refBuckets map[BucketKey]*struct {
	tokens float64
	last   int64
}

func (m refBuckets) takeAll(now int64, takes []Take) []Result {
	tokens := make([]float64, len(takes))
	all := true
	for i, t := range takes {
		tokens[i] = t.Limit.Burst
		if b := m[t.Key]; b != nil {
			tokens[i] = b.tokens
			if now > b.last {
				tokens[i] += float64(now-b.last) / 1e9 * t.Limit.Rate
			}
			tokens[i] = math.Min(tokens[i], t.Limit.Burst)
		}
		all = all && tokens[i] >= t.Cost
	}
	res := make([]Result, len(takes))
	for i, t := range takes {
		left := tokens[i]
		if all {
			left -= t.Cost
			b := m[t.Key]
			if b == nil {
				b = &struct {
					tokens float64
					last   int64
				}{last: now}
				m[t.Key] = b
			}
			b.tokens, b.last = left, max(b.last, now)
			res[i].Allowed = true
		} else {
			res[i].RetryAfter = secondsToDuration((t.Cost - left) / t.Limit.Rate)
		}
		res[i].Remaining = left
		res[i].ResetAfter = secondsToDuration((t.Limit.Burst - left) / t.Limit.Rate)
	}
	return res
}

// checkTakeAll runs a random sequence (from seed) of TakeAlls and single
// takes over six buckets of two tenants on a MemoryStore and on the
// reference model: every result must be the same, and a refused TakeAll
// must charge nothing.
func checkTakeAll(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	s := NewMemoryStore(MemoryStoreOptions{Shards: 4, SweepInterval: time.Hour})
	ref := refBuckets{}
	var keys []BucketKey
	limits := map[BucketKey]Limit{}
	for _, tn := range []string{"acme", "initech"} {
		for _, sc := range []string{"", "export", "daily"} {
			k := BucketKey{Tenant: tn, Scope: sc}
			keys = append(keys, k)
			limits[k] = Limit{Rate: []float64{0.5, 3, 40}[rng.IntN(3)], Burst: float64(1 + rng.IntN(8))}
		}
	}
	now := int64(1e12)
	denied := 0
	for step := range 300 {
		now += rng.Int64N(int64(400 * time.Millisecond))
		if rng.IntN(10) == 0 {
			now -= rng.Int64N(int64(time.Second)) // a clock stepping back
		}
		n := 1 + rng.IntN(3)
		var takes []Take
		for _, i := range rng.Perm(len(keys))[:n] {
			k := keys[i]
			takes = append(takes, Take{Key: k, Limit: limits[k], Cost: []float64{0.5, 1, 2, 3}[rng.IntN(4)]})
		}
		got := make([]Result, n)
		if err := s.TakeAllAt(now, takes, got); err != nil {
			t.Fatal(err)
		}
		want := ref.takeAll(now, takes)
		for i := range takes {
			if got[i] != want[i] {
				t.Fatalf("seed %d step %d take %d (%+v) of %d:\n got %+v\nwant %+v", seed, step, i, takes[i], n, got[i], want[i])
			}
			if got[i].Remaining < 0 || got[i].Remaining > takes[i].Limit.Burst {
				t.Fatalf("seed %d step %d: remaining %v outside [0, %v]", seed, step, got[i].Remaining, takes[i].Limit.Burst)
			}
		}
		if !got[0].Allowed {
			denied++
		}
	}
	if denied == 0 {
		t.Errorf("seed %d: nothing refused; the sequence tests nothing", seed)
	}
}

func TestTakeAllMatchesReference(t *testing.T) {
	for seed := range uint64(100) {
		checkTakeAll(t, seed)
	}
}

func FuzzTakeAll(f *testing.F) {
	f.Add(uint64(1))
	f.Add(uint64(1 << 40))
	f.Fuzz(func(t *testing.T, seed uint64) { checkTakeAll(t, seed) })
}

// TestTakeAllNoneCharged: the daily quota says no, so the burst bucket,
// which had room, is not charged; and a duplicate bucket is refused.
func TestTakeAllNoneCharged(t *testing.T) {
	s := NewMemoryStore(MemoryStoreOptions{})
	ctx := context.Background()
	burst := Take{Key: BucketKey{Tenant: "acme", Scope: "burst"}, Limit: Limit{Rate: 20, Burst: 100}, Cost: 1}
	daily := Take{Key: BucketKey{Tenant: "acme", Scope: "daily"}, Limit: Limit{Rate: 3.0 / 86400, Burst: 3}, Cost: 1}
	for i := range 3 {
		if r, _ := s.TakeAll(ctx, []Take{burst, daily}); !r[0].Allowed || !r[1].Allowed {
			t.Fatalf("take %d: %+v", i, r)
		}
	}
	r, err := s.TakeAll(ctx, []Take{burst, daily})
	if err != nil || r[0].Allowed || r[1].Allowed {
		t.Fatalf("4th take with the daily quota spent: %+v, %v", r, err)
	}
	// Three a day: one token every 8 hours.
	if r[0].RetryAfter != 0 || (r[1].RetryAfter-8*time.Hour).Abs() > time.Millisecond {
		t.Errorf("retry after: burst %v (has room: want 0), daily %v (want 8h)", r[0].RetryAfter, r[1].RetryAfter)
	}
	if got := s.Tokens(burst.Key, burst.Limit); got > 97.01 {
		t.Errorf("burst bucket holds %v after 3 admissions and a refusal; want 97 (the refusal charged nothing)", got)
	}
	if _, err := s.TakeAll(ctx, []Take{burst, burst}); !errors.Is(err, ErrDuplicateBucket) {
		t.Errorf("duplicate bucket: %v, want ErrDuplicateBucket", err)
	}
}

// TestDuplicate: Duplicate finds a bucket named twice, first or last,
// below and above the count where it stops comparing pairs.
func TestDuplicate(t *testing.T) {
	for _, n := range []int{2, duplicateScan, duplicateScan + 1, 1000} {
		takes := make([]Take, n)
		for i := range takes {
			takes[i].Key = BucketKey{Tenant: strconv.Itoa(i)}
		}
		if Duplicate(takes) {
			t.Fatalf("%d distinct takes: a duplicate reported", n)
		}
		takes[n-1].Key = takes[0].Key
		if !Duplicate(takes) {
			t.Fatalf("%d takes, the first and the last the same: no duplicate reported", n)
		}
	}
}
