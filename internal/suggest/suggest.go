// Package suggest finds the name a misspelt one was probably meant to be:
// the "did you mean" of a config error. The names a config may use live
// in three packages (a field in the gateway's decoder, a tier in tenant, a
// pool or group in admission), and each names its own error at the source,
// so the one rule for "near enough" lives here rather than thrice.
package suggest

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Nearest returns the name in names nearest to word, or "" when none is
// near enough to be a plausible typo of it. Near is counted in edits
// (a letter inserted, deleted or replaced, or two neighbours swapped),
// ignoring case; near enough is at most a third of word's letters, and at
// least one edit, so that "burts" finds "burst" and "prp" finds "pro",
// but "x" finds nothing. Ties go to the earlier name: give names sorted
// for a stable answer. word itself, were it in names, is not returned.
func Nearest(word string, names []string) string {
	most := max(1, utf8.RuneCountInString(word)/3)
	best, bestD := "", most+1
	lw := []rune(strings.ToLower(word))
	for _, n := range names {
		if n == word {
			continue
		}
		if d := distance(lw, []rune(strings.ToLower(n))); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// DidYouMean returns "; did you mean `NAME`?" for Nearest's answer, to
// end an error message with, or "" when it has none.
func DidYouMean(word string, names []string) string {
	if n := Nearest(word, names); n != "" {
		return fmt.Sprintf("; did you mean `%s`?", n)
	}
	return ""
}

// distance is the optimal string alignment distance between a and b:
// Levenshtein's, with a swap of two adjacent letters counting as one edit
// (the commonest typo on a keyboard).
func distance(a, b []rune) int {
	// Three rows of the dynamic programme: i-2, i-1 and i.
	prev2, prev, cur := make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
