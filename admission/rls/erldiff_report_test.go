package rls_test

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
)

// erlDifference is a difference from envoyproxy/ratelimit that fairgate
// documents. doc is a phrase of docs/envoy.md that states it: while the
// doc no longer says it, the difference counts as undocumented.
type erlDifference struct {
	id, reason, doc string
}

// erlDocumented are the documented differences, one line each, as
// docs/envoy.md states them: "(n)" is the item of its list "Differences
// from envoyproxy/ratelimit"; the last four are stated elsewhere in it
// (several descriptors, how a request is answered).
var erlDocumented = []erlDifference{
	{"token-bucket", "(1) token buckets, not fixed windows: the figures are the bucket's; RateLimit-Reset is when it holds the cost or is full", "**Token bucket, not fixed window.**"},
	{"window-reset", "(1) ERL's window turned over within the sequence and restarted its counter; a bucket does not reset", "admits all six (a new window)"},
	{"all-or-nothing", "(2) a refused request charges none of its descriptors, and one it did not charge is a bare OK", "**All or nothing.**"},
	{"zero-limit", "(2) an enforced requests_per_unit: 0 refuses without charging the others", "An enforced `requests_per_unit: 0`, or an enforced check over its limit, refuses without charging"},
	{"check-over", "(2) an enforced check over its limit refuses without charging the others: each a bare OK", "an enforced check over its limit refuses the request, whose other descriptors are then not charged"},
	{"refused-free", "(3) a refused call takes nothing (ERL counts its hits)", "**A refused call takes nothing.**"},
	{"checks", "(4) a descriptor's hits_addend 0 is a check: it takes nothing and is over below one token, on both stores (OK without state only when Redis does not answer)", "**Checks.**"},
	{"override-raise", "(5) an override takes from the configured limit's bucket: a higher limit brings no tokens", "**An override that raises the limit.**"},
	{"remembered-denial", "(5) on the Redis store a refusal is remembered, per limit, for the wait it was told: a shared bucket refilled faster under the other limit does not lift it", "remembers a refusal, per limit, for the wait it was told"},
	{"unit-multiplier", "(6) an override's unit_multiplier multiplies its window (ERL ignores it)", "**`unit_multiplier`.**"},
	{"override-unit", "(7) an override with an unknown unit is InvalidArgument (ERL fails Unavailable)", "**An override with an unknown unit**"},
	{"global-shadow", "(8) under rls.shadow the tokens are taken as enforcement would: a request one descriptor refuses charges none", "**Global shadow and several descriptors.**"},
	{"headers", "(9) with headers on: RateLimit-Policy, RateLimit and Retry-After too, for the descriptor that decided", "**Response headers, when enabled.**"},
	{"refill", "(10) limit_remaining is the whole tokens left, which came back within the sequence", "**`limit_remaining` of an admitted call**"},
	{"bounds", "(11) more than rls.max_descriptors descriptors is InvalidArgument", "**Bounds.**"},
	{"shadow-taken", "shadow descriptors are taken with the others; when only they refuse, the enforced ones are charged", "when only shadow descriptors refuse, the request is OK and the enforced ones are charged"},
	{"shadow-enforced", "a shadow descriptor's tokens are taken as if enforced: when only it refuses, nothing is charged", "Either way the tokens are taken as if enforced."},
	{"same-entries", "two descriptors with the same entries are one bucket charged both costs", "Two descriptors with the same entries are one bucket"},
	{"invalid-argument", "no domain or no descriptors is InvalidArgument (ERL: Unknown)", "No domain, no descriptors"},
}

// documentedNow returns the ids of erlDocumented that docs/envoy.md
// (at path) still states, and a line for each it no longer does.
func documentedNow(path string) (map[string]bool, []string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	text := strings.Join(strings.Fields(string(b)), " ")
	ok := map[string]bool{}
	var gone []string
	for _, d := range erlDocumented {
		if strings.Contains(text, strings.Join(strings.Fields(d.doc), " ")) {
			ok[d.id] = true
		} else {
			gone = append(gone, fmt.Sprintf("%s: docs/envoy.md no longer says %q; counted as undocumented", d.id, d.doc))
		}
	}
	return ok, gone, nil
}

// callResult is one compared call.
type callResult struct {
	config, mode, seq string
	index             int
	req               string
	erl, fg           string
	diffs             []diff
	misses            []string // fields both agree on that the model predicted otherwise
}

func (c *callResult) undocumented() []diff {
	var out []diff
	for _, d := range c.diffs {
		if len(d.reasons) == 0 {
			out = append(out, d)
		}
	}
	return out
}

func (c *callResult) where() string {
	return fmt.Sprintf("%s [%s] %s #%d", c.config, c.mode, c.seq, c.index+1)
}

// tally is one row of the table.
type tally struct {
	calls, equal, documented, undocumented int
	note                                   string
}

func (t *tally) add(c *callResult) {
	t.calls++
	switch {
	case len(c.diffs) == 0:
		t.equal++
	case len(c.undocumented()) > 0:
		t.undocumented++
	default:
		t.documented++
	}
}

// report is the test's output: the table per config, the documented
// differences seen, and every call that differs.
type report struct {
	order   []string
	rows    map[string]*tally
	modes   map[string]*tally
	calls   []*callResult
	notes   []string
	reasons map[string]int
	// seqs lists each config's sequences with their calls, as run in the
	// default mode.
	seqs map[string][]string
	// modelMisses counts fields both services agree on that the model
	// predicted otherwise.
	modelMisses int
}

func newReport() *report {
	return &report{rows: map[string]*tally{}, modes: map[string]*tally{}, reasons: map[string]int{}, seqs: map[string][]string{}}
}

func (r *report) row(config string) *tally {
	t := r.rows[config]
	if t == nil {
		t = &tally{}
		r.rows[config] = t
		r.order = append(r.order, config)
	}
	return t
}

func (r *report) add(c *callResult) {
	r.row(c.config).add(c)
	if r.modes[c.mode] == nil {
		r.modes[c.mode] = &tally{}
	}
	r.modes[c.mode].add(c)
	if len(c.diffs) > 0 || len(c.misses) > 0 {
		r.calls = append(r.calls, c)
	}
	r.modelMisses += len(c.misses)
	seen := map[string]bool{}
	for _, d := range c.diffs {
		for _, id := range d.reasons {
			if !seen[id] {
				seen[id] = true
				r.reasons[id]++
			}
		}
	}
}

// table renders the summary: one row per config (its three modes summed),
// the totals per mode, and the documented differences with the calls each
// explained.
func (r *report) table() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "config\tcalls\tequal\tdocumented\tundocumented\tnote")
	var total tally
	for _, name := range r.order {
		t := r.rows[name]
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%s\n", name, t.calls, t.equal, t.documented, t.undocumented, t.note)
		total.calls, total.equal, total.documented, total.undocumented = total.calls+t.calls, total.equal+t.equal, total.documented+t.documented, total.undocumented+t.undocumented
	}
	fmt.Fprintf(w, "TOTAL\t%d\t%d\t%d\t%d\t\n", total.calls, total.equal, total.documented, total.undocumented)
	w.Flush()
	b.WriteString("\nby mode:\n")
	w = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "mode\tcalls\tequal\tdocumented\tundocumented")
	modes := make([]string, 0, len(r.modes))
	for m := range r.modes {
		modes = append(modes, m)
	}
	sort.Strings(modes)
	for _, m := range modes {
		t := r.modes[m]
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\n", m, t.calls, t.equal, t.documented, t.undocumented)
	}
	w.Flush()
	b.WriteString("\ndocumented differences (calls each explains; a call may need several):\n")
	w = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, d := range erlDocumented {
		fmt.Fprintf(w, "%s\t%d\t%s\n", d.id, r.reasons[d.id], d.reason)
	}
	w.Flush()
	if len(r.notes) > 0 {
		b.WriteString("\nnotes:\n")
		for _, n := range r.notes {
			b.WriteString("  " + n + "\n")
		}
	}
	return b.String()
}

// undocumentedLines is one line per call with an undocumented difference:
// where, the request, and each such field with both values.
func (r *report) undocumentedLines() []string {
	var out []string
	for _, c := range r.calls {
		u := c.undocumented()
		if len(u) == 0 {
			continue
		}
		var fs []string
		for _, d := range u {
			s := fmt.Sprintf("%s: ERL %s, fairgate %s", d.field, d.erl, d.fg)
			if d.note != "" {
				s += " (" + d.note + ")"
			}
			fs = append(fs, s)
		}
		out = append(out, fmt.Sprintf("%s: %s\n    %s", c.where(), c.req, strings.Join(fs, "\n    ")))
	}
	return out
}

// full is the file's content: the table, then every differing call with
// both answers and each field's class.
func (r *report) full() string {
	var b strings.Builder
	b.WriteString(r.table())
	b.WriteString("\nsequences (each from an empty Redis; run in every mode, malformed in the default one only):\n")
	for _, name := range r.order {
		if len(r.seqs[name]) > 0 {
			fmt.Fprintf(&b, "  %s:\n    %s\n", name, strings.Join(r.seqs[name], "\n    "))
		}
	}
	b.WriteString("\ncalls that differ (and calls the model did not predict):\n")
	for _, c := range r.calls {
		fmt.Fprintf(&b, "\n%s: %s\n  ERL:      %s\n  fairgate: %s\n", c.where(), c.req, c.erl, c.fg)
		for _, d := range c.diffs {
			class := "UNDOCUMENTED"
			if len(d.reasons) > 0 {
				class = "documented: " + strings.Join(slices.Compact(slices.Sorted(slices.Values(d.reasons))), ", ")
			}
			fmt.Fprintf(&b, "  %-28s ERL %-22s fairgate %-22s %s", d.field, d.erl, d.fg, class)
			if d.note != "" {
				b.WriteString(" — " + d.note)
			}
			b.WriteString("\n")
		}
		for _, m := range c.misses {
			fmt.Fprintf(&b, "  model miss: %s\n", m)
		}
	}
	return b.String()
}
