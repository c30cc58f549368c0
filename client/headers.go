package client

import (
	"math"
	"strconv"
	"strings"
)

// The RateLimit headers, in the IETF httpapi draft's structured-field form
// and the older trio, spelled as net/http canonicalizes them so that a
// lookup allocates nothing.
const (
	hdrRateLimit          = "Ratelimit"        // "tenant";r=20;t=1
	hdrRateLimitPolicy    = "Ratelimit-Policy" // "tenant";q=25;w=5
	hdrRateLimitLimit     = "Ratelimit-Limit"
	hdrRateLimitRemaining = "Ratelimit-Remaining"
	hdrRateLimitReset     = "Ratelimit-Reset"
)

// sfItems iterates over the items of an RFC 8941 list such as
// `"tenant";r=20;t=1, "exports";r=3;t=4`. The zero value is an empty list.
// It never allocates: names and parameters are substrings of the field.
type sfItems struct{ s string }

// next returns the next item's name (an sf-string's contents, escapes
// left as sent, or a token) and its parameters (";r=20;t=1"). ok is false
// at the end of the list or at the first malformed item.
func (it *sfItems) next() (name, params string, ok bool) {
	s := strings.TrimLeft(it.s, " \t,")
	if s == "" {
		return "", "", false
	}
	var rest string
	if s[0] == '"' {
		end := quoteEnd(s)
		if end < 0 {
			it.s = ""
			return "", "", false
		}
		name, rest = s[1:end], s[end+1:]
	} else {
		end := strings.IndexAny(s, ";, \t")
		if end < 0 {
			end = len(s)
		}
		name, rest = s[:end], s[end:]
	}
	// The parameters run to the next comma outside a quoted string.
	end := len(rest)
	for i := 0; i < len(rest); i++ {
		if rest[i] == '"' {
			q := quoteEnd(rest[i:])
			if q < 0 {
				it.s = ""
				return "", "", false
			}
			i += q
			continue
		}
		if rest[i] == ',' {
			end = i
			break
		}
	}
	params, it.s = rest[:end], rest[end:]
	return name, params, name != ""
}

// eachItem calls f with the name and the parameters k1 and k2 of each item
// of the list fields vals (the lines of one header).
func eachItem(vals []string, k1, k2 string, f func(name string, v1, v2 float64, ok1, ok2 bool)) {
	for _, v := range vals {
		it := sfItems{v}
		for {
			name, params, ok := it.next()
			if !ok {
				break
			}
			v1, ok1 := param(params, k1)
			v2, ok2 := param(params, k2)
			f(name, v1, v2, ok1, ok2)
		}
	}
}

// quoteEnd returns the index of the quote that closes the sf-string s
// starts with, or -1.
func quoteEnd(s string) int {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return -1
}

// param returns the value of parameter key in params (";r=20;t=1") when
// it is a finite number ≥ 0.
func param(params, key string) (float64, bool) {
	for params != "" {
		var p string
		p, params, _ = strings.Cut(params, ";")
		k, v, found := strings.Cut(strings.TrimSpace(p), "=")
		if found && k == key {
			return number(v)
		}
	}
	return 0, false
}

// number parses an sf-integer or sf-decimal (or a plain header number)
// that is finite and ≥ 0.
func number(s string) (float64, bool) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

// leadingNumber parses the number a trio header starts with: older drafts
// allow "100, 100;w=60" in RateLimit-Limit.
func leadingNumber(s string) (float64, bool) {
	if i := strings.IndexAny(s, ",;"); i >= 0 {
		s = s[:i]
	}
	return number(s)
}
