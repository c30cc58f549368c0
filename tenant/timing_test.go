package tenant

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// The timing pair: an unknown key that differs from a real one only in its
// last byte, against an unknown key of random bytes of the same length.
// Lookup hashes the presented key before anything is compared, so the two
// should cost the same; compare them with
//
//	go test -run '^$' -bench 'BenchmarkLookup(NearMiss|Random)$' -count 10 ./tenant
//
// and benchstat. Timing is not asserted in a test: on a shared machine
// that would be a flaky test, not a proof. The benchmarks run serially
// (not RunParallel, unlike BenchmarkLookup) so that the two are measured
// the same way with the least noise.

const timingTenants = 10_000

// timingRegistry returns a registry of timingTenants tenants whose keys are
// "live-key-" and 19 digits (28 bytes), and those keys.
func timingRegistry(b *testing.B) (*Registry, []string) {
	b.Helper()
	c := Config{Tiers: map[string]TierConfig{"pro": {Rate: 20, Burst: 100}}}
	keys := make([]string, timingTenants)
	for i := range keys {
		keys[i] = "live-key-" + strconv.FormatUint(1e18+uint64(i)*7919, 10)
		c.Tenants = append(c.Tenants, TenantConfig{ID: "t" + strconv.Itoa(i), Tier: "pro", APIKeysSHA256: []string{HashKey(keys[i])}})
	}
	reg, err := NewRegistry(c)
	if err != nil {
		b.Fatal(err)
	}
	return reg, keys
}

func benchmarkMisses(b *testing.B, reg *Registry, misses []string) {
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, ok := reg.Lookup(misses[i%len(misses)]); ok {
			b.Fatal("a miss was found")
		}
		i++
	}
}

func BenchmarkLookupNearMiss(b *testing.B) {
	reg, keys := timingRegistry(b)
	misses := make([]string, len(keys))
	for i, k := range keys {
		last := k[len(k)-1]
		misses[i] = k[:len(k)-1] + string(rune('a'+last%16)) // a digit becomes a letter: same length, last byte differs
	}
	benchmarkMisses(b, reg, misses)
}

func BenchmarkLookupRandom(b *testing.B) {
	reg, keys := timingRegistry(b)
	rng := rand.New(rand.NewPCG(1, 2))
	const printable = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_"
	misses := make([]string, len(keys))
	for i := range misses {
		buf := make([]byte, len(keys[i]))
		for j := range buf {
			buf[j] = printable[rng.IntN(len(printable))]
		}
		misses[i] = string(buf)
	}
	benchmarkMisses(b, reg, misses)
}
