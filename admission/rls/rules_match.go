package rls

import (
	"strings"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// pattern is a compiled wildcard: each "*" stands for any run of
// characters, none included. A pattern from a value matches an entry's
// value (its key must be the descriptor's key); one from a key with a
// "*" (joined) matches the entry's key and value joined by "_" against
// the descriptor's key and value joined alike, as envoyproxy/ratelimit
// matches every wildcard.
type pattern struct {
	parts  []string // the text split at each "*": at least two
	fixed  int      // the parts' total length
	joined bool
}

// compilePattern compiles s, which holds at least one "*".
func compilePattern(s string, joined bool) *pattern {
	p := &pattern{parts: strings.Split(s, "*"), joined: joined}
	for _, part := range p.parts {
		p.fixed += len(part)
	}
	return p
}

// match reports whether s matches p: s begins with the first part, ends
// with the last, and holds the others in order between them. Taking each
// middle part at its first place is enough: a later place leaves less room
// for the rest, never more. It does not allocate.
func (p *pattern) match(s string) bool {
	first, last := p.parts[0], p.parts[len(p.parts)-1]
	if len(s) < p.fixed || !strings.HasPrefix(s, first) || !strings.HasSuffix(s, last) {
		return false
	}
	s = s[len(first) : len(s)-len(last)]
	for _, mid := range p.parts[1 : len(p.parts)-1] {
		i := strings.Index(s, mid)
		if i < 0 {
			return false
		}
		s = s[i+len(mid):]
	}
	return true
}

// child returns the node that entry (key, value) reaches from lvl, or nil,
// in envoyproxy/ratelimit's order: the child with this key and exactly this
// value (a wildcard's text, sent as it is, is such a value); else the first
// wildcard child, in config order, that matches; else the child with this
// key and no value.
func (lvl *level) child(key, value string) *node {
	if n := lvl.exact[entryKey{key, value}]; n != nil {
		return n
	}
	for _, w := range lvl.wild {
		if w.pat.joined {
			if w.pat.match(key + "_" + value) {
				return w
			}
		} else if w.key == key && w.pat.match(value) {
			return w
		}
	}
	return lvl.byKey[key]
}

// bucketKey names the bucket r takes for a request descriptor's entries
// (those that reached r's node): bucketKey of the entries as sent, except
// that an entry that reached a descriptor with share_threshold is named by
// that descriptor's wildcard, so every value it matches counts in one
// bucket ("files/*" for files/a.pdf and files/b.csv), as
// envoyproxy/ratelimit keys them. A request-level override's rule shares
// nothing: envoyproxy/ratelimit keys it by the entries as sent.
func (r *rule) bucketKey(tag string, entries []*ratelimitEntry) ratelimit.BucketKey {
	if r.shared == nil {
		return bucketKey(tag, entries)
	}
	named := make([]*ratelimitEntry, len(entries))
	for i, e := range entries {
		named[i] = e
		if i < len(r.shared) && r.shared[i] != "" {
			named[i] = &ratelimitEntry{Key: e.Key, Value: sharedValue(r.shared[i], e.Key)}
		}
	}
	return bucketKey(tag, named)
}

// sharedValue is the value that names an entry with key in a shared
// bucket: the wildcard as written ("key_value") without "key_", as
// envoyproxy/ratelimit takes it (a wildcard in the key may leave the whole
// text).
func sharedValue(wildcard, key string) string {
	if len(wildcard) > len(key) && strings.HasPrefix(wildcard, key) && wildcard[len(key)] == '_' {
		return wildcard[len(key)+1:]
	}
	return wildcard
}
