package redisstore

import (
	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// bucketLua is the token bucket the bucket scripts share, prepended to
// each.
//
//go:embed bucket.lua
var bucketLua string

//go:embed take.lua
var takeLua string

//go:embed sync.lua
var syncLua string

//go:embed relimit.lua
var relimitLua string

// takeScript runs take.lua, syncScript sync.lua, relimitScript
// relimit.lua.
var (
	takeScript    = redis.NewScript(bucketLua + takeLua)
	syncScript    = redis.NewScript(bucketLua + syncLua)
	relimitScript = redis.NewScript(bucketLua + relimitLua)
)

// keyPrefix starts every key the store writes.
const keyPrefix = "fg:{"

// globalTag is the hash tag of the global backstop bucket (BucketKey.Tenant
// empty). Tenant tags are 32 hex digits, so it cannot collide with one.
const globalTag = "g"

// maxPlainScope is the longest scope written into a key as it is.
const maxPlainScope = 64

// bucketKey returns the Redis key of k: "fg:{<tag>}:<scope>".
//
// The tag is the first 128 bits of SHA-256(tenant) in hex, or "g" for the
// global bucket: it contains no brace, so Redis Cluster hashes exactly the
// tag and every scope of a tenant lives in the tenant's slot, whatever bytes
// the tenant ID holds. The scope follows the fixed-length tag; it is written
// as is when it is at most 64 of [A-Za-z0-9._/-], and otherwise as '#' and
// 128 bits of its SHA-256 in hex. '#' is outside the plain alphabet, so the
// two forms cannot collide, and no scope can make a key long.
func bucketKey(k ratelimit.BucketKey) string {
	// One allocation: the key is built in a buffer on the stack.
	var buf [maxKey]byte
	return string(appendKey(buf[:0], k))
}

// maxKey is the length of the longest key bucketKey returns.
const maxKey = len(keyPrefix) + 32 + 2 + 1 + maxPlainScope

// appendKey appends bucketKey(k) to b.
func appendKey(b []byte, k ratelimit.BucketKey) []byte {
	b = append(b, keyPrefix...)
	if k.Tenant == "" {
		b = append(b, globalTag...)
	} else {
		b = appendHash128(b, k.Tenant)
	}
	b = append(b, "}:"...)
	if plainScope(k.Scope) {
		return append(b, k.Scope...)
	}
	return appendHash128(append(b, '#'), k.Scope)
}

// appendHash128 appends the first 128 bits of SHA-256(s) in hex to b.
func appendHash128(b []byte, s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return hex.AppendEncode(b, sum[:16])
}

func plainScope(s string) bool {
	if len(s) > maxPlainScope {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '.', c == '_', c == '/', c == '-':
		default:
			return false
		}
	}
	return true
}

// decodeTake checks the shape of take.lua's (or window.lua's) reply to
// takes, {0|1, a little-endian double per take (two for a window), µs},
// and derives each take's Result from its bucket's tokens (or its
// window's) exactly as the embedded store's arithmetic does. It returns
// the Redis clock the script read (µs).
func decodeTake(v any, takes []ratelimit.Take, res []ratelimit.Result) (int64, error) {
	n := len(takes)
	a, ok := v.([]any)
	if !ok || len(a) != n+2 {
		return 0, fmt.Errorf("%w: %T %v, want a %d-element array", errBadReply, v, v, n+2)
	}
	allowed, ok := a[0].(int64)
	if !ok || (allowed != 0 && allowed != 1) {
		return 0, fmt.Errorf("%w: allowed = %T %v, want 0 or 1", errBadReply, a[0], a[0])
	}
	now, ok := a[n+1].(int64)
	if !ok {
		return 0, fmt.Errorf("%w: now = %T, want an integer", errBadReply, a[n+1])
	}
	for i, t := range takes {
		if t.Limit.Fixed() {
			r, err := decodeWindow(a[i+1], t.Cost, allowed == 1, now)
			if err != nil {
				return 0, err
			}
			res[i] = r
			continue
		}
		tokens, err := decodeDouble(a[i+1])
		if err != nil {
			return 0, err
		}
		res[i] = bucketResult(t, tokens, allowed == 1)
	}
	return now, nil
}

// bucketResult is the Result of take t, allowed or not, from a bucket
// holding tokens, by the embedded store's arithmetic.
func bucketResult(t ratelimit.Take, tokens float64, allowed bool) ratelimit.Result {
	// Below zero is sync mode's debt (sync.lua): nothing remains.
	r := ratelimit.Result{Allowed: allowed, Remaining: max(0, tokens)}
	if !allowed {
		r.RetryAfter = secondsToDuration((t.Cost - tokens) / t.Limit.Rate)
	}
	r.ResetAfter = secondsToDuration((t.Limit.Burst - tokens) / t.Limit.Rate)
	return r
}

// decodeDouble decodes a script's struct.pack '<d' number.
func decodeDouble(v any) (float64, error) {
	var f [1]float64
	err := decodeDoubles(v, f[:])
	return f[0], err
}

// decodeDoubles decodes a script's struct.pack of len(dst) '<d' numbers
// into dst.
func decodeDoubles(v any, dst []float64) error {
	s, ok := v.(string)
	if !ok || len(s) != 8*len(dst) {
		return fmt.Errorf("%w: tokens = %T %q, want %d bytes", errBadReply, v, v, 8*len(dst))
	}
	for i := range dst {
		dst[i] = math.Float64frombits(binary.LittleEndian.Uint64([]byte(s[8*i : 8*i+8])))
		if math.IsNaN(dst[i]) {
			return fmt.Errorf("%w: tokens = NaN", errBadReply)
		}
	}
	return nil
}

// secondsToDuration rounds s seconds up to a Duration, as admission does,
// so a client told to wait that long finds the tokens there.
func secondsToDuration(s float64) time.Duration {
	if s <= 0 {
		return 0
	}
	return time.Duration(math.Ceil(s * 1e9))
}

// validTake reports whether l is valid (validLimit) and cost a positive
// finite number.
func validTake(l ratelimit.Limit, cost float64) bool {
	return validLimit(l) && positiveFinite(cost)
}

// validLimit reports whether l's rate and burst are positive finite
// numbers, and its End, when set (a fixed window), an instant after the
// epoch.
func validLimit(l ratelimit.Limit) bool {
	return positiveFinite(l.Rate) && positiveFinite(l.Burst) && l.End >= 0
}

// positiveFinite reports whether x > 0 and finite (NaN is neither).
func positiveFinite(x float64) bool { return x > 0 && !math.IsInf(x, 0) }
