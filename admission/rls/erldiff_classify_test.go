package rls_test

import (
	"strings"
	"testing"
	"time"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The differential test's own machinery, without ERL: these run in `go
// test`, so that the classifier that decides what is documented is
// itself tested, negative controls included.

func TestERLDiffMatch(t *testing.T) {
	f, why := parseERLFile([]byte(`domain: d
descriptors:
  - key: path
    value: /api/*/x
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: path
    value: /exact
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: outer
    descriptors:
      - key: inner
        rate_limit: {unit: hour, requests_per_unit: 5}
`))
	if f == nil {
		t.Fatal(why)
	}
	for _, c := range []struct {
		entries [][2]string
		rpu     int // -1: not limited
		bucket  string
	}{
		{[][2]string{{"path", "/exact"}}, 4, "d|path=/exact"},
		// The first wildcard in config order, not the longest.
		{[][2]string{{"path", "/api/v1/x"}}, 1, "d|path=/api/v1/x"},
		// A shared wildcard counts under its pattern.
		{[][2]string{{"path", "/api/v1/y"}}, 2, "d|path=/api/*"},
		{[][2]string{{"path", "/other"}}, 3, "d|path=/other"},
		{[][2]string{{"outer", "a"}, {"inner", "b"}}, 5, "d|outer=a|inner=b"},
		{[][2]string{{"outer", "a"}}, -1, "d|outer=a"},
		// Deeper than the tree: not limited (README example 4).
		{[][2]string{{"path", "/exact"}, {"more", "x"}}, -1, "d|path=/exact"},
	} {
		m := f.erlMatch(c.entries)
		got := -1
		if m.limit != nil {
			got = int(m.limit.rpu)
		}
		if got != c.rpu || m.limit != nil && m.bucket != c.bucket {
			t.Errorf("%v: limit %d bucket %q, want %d %q", c.entries, got, m.bucket, c.rpu, c.bucket)
		}
	}
	for _, c := range []struct {
		pattern, s string
		want       bool
	}{
		{"a*", "a", true}, {"a*", "ab", true}, {"a*", "ba", false},
		{"/api/*/x", "/api/1/x", true}, {"/api/*/x", "/api/1/y", false},
		{"a*b*c", "abc", true}, {"a*b*c", "axbyc", true}, {"a*b*c", "acb", false},
		{"ab*ba", "aba", false},
	} {
		if got := globMatch(c.pattern, c.s); got != c.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
}

func TestERLDiffYAMLBlocks(t *testing.T) {
	md := "# Top\n```yaml\na: 1\n```\n## Ex\ntext\n```yaml\nb: 2\n```\n```\nnot yaml\n```\n```yaml\nc: 3\n```\n"
	bs := yamlBlocks([]byte(md))
	var got []string
	for _, b := range bs {
		got = append(got, b.name+"="+strings.TrimSpace(string(b.data)))
	}
	want := "README.md Top=a: 1|README.md Ex=b: 2|README.md Ex #2=c: 3"
	if strings.Join(got, "|") != want {
		t.Fatalf("blocks %q, want %q", strings.Join(got, "|"), want)
	}
}

// step is one call of a classifier test: the request, both answers, and
// what the classifier must make of the difference.
type classifyStep struct {
	name     string
	advance  time.Duration // the clock moves first (besides 1 ms a step)
	req      *rlsv3.RateLimitRequest
	erl, fg  *rlsv3.RateLimitResponse
	want     string // "equal", "documented" or "undocumented"
	reason   string // a documented difference the call must be put down to
	wantNote string
}

func runClassify(t *testing.T, m *model, steps []classifyStep) {
	t.Helper()
	now := time.Unix(1_700_000_000, 0) // early in a minute
	for _, s := range steps {
		now = now.Add(time.Millisecond + s.advance)
		e, f := answerFields(s.erl, nil), answerFields(s.fg, nil)
		if m.fixed {
			e, f = withResets(e, s.erl), withResets(f, s.fg)
		}
		ds := m.classify(s.req, e, f, now, now.Add(100*time.Microsecond))
		c := &callResult{diffs: ds}
		got := "equal"
		switch {
		case len(c.undocumented()) > 0:
			got = "undocumented"
		case len(ds) > 0:
			got = "documented"
		}
		if got != s.want {
			t.Errorf("%s: %s, want %s: %+v", s.name, got, s.want, ds)
			continue
		}
		if s.reason != "" && !strings.Contains(strings.Join(reasonsOf(ds), " "), s.reason) {
			t.Errorf("%s: reasons %v, want %s among them", s.name, reasonsOf(ds), s.reason)
		}
		if s.wantNote != "" && !strings.Contains(notesOf(ds), s.wantNote) {
			t.Errorf("%s: notes %q, want %q in them", s.name, notesOf(ds), s.wantNote)
		}
	}
}

func reasonsOf(ds []diff) []string {
	var r []string
	for _, d := range ds {
		r = append(r, d.reasons...)
	}
	return r
}

func notesOf(ds []diff) string {
	var n []string
	for _, d := range ds {
		n = append(n, d.note)
	}
	return strings.Join(n, "; ")
}

func allDocumented() map[string]bool {
	m := map[string]bool{}
	for _, d := range erlDocumented {
		m[d.id] = true
	}
	return m
}

const classifyConfig = `domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: team
    rate_limit: {unit: minute, requests_per_unit: 10}
`

func answer(overall rlsv3.RateLimitResponse_Code, sts ...*rlsv3.RateLimitResponse_DescriptorStatus) *rlsv3.RateLimitResponse {
	return &rlsv3.RateLimitResponse{OverallCode: overall, Statuses: sts}
}

func st(code rlsv3.RateLimitResponse_Code, rpu uint32, name string, remaining uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
	s := &rlsv3.RateLimitResponse_DescriptorStatus{Code: code, LimitRemaining: remaining}
	if rpu > 0 {
		s.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: rpu, Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE, Name: name}
	}
	return s
}

func rq(hits uint32, ds ...*commonrl.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "d", HitsAddend: hits, Descriptors: ds}
}

const (
	okc   = rlsv3.RateLimitResponse_OK
	overc = rlsv3.RateLimitResponse_OVER_LIMIT
)

// TestERLDiffClassify: a refused request that fairgate does not count is
// the documented token-bucket difference, and so is what follows from it;
// the negative controls — a bucket that gives back more than it holds,
// a wrong name, a difference whose phrase is gone from the doc — are
// undocumented.
func TestERLDiffClassify(t *testing.T) {
	f, _ := parseERLFile([]byte(classifyConfig))
	user := func() *commonrl.RateLimitDescriptor { return descOf([][2]string{{"user", "a"}}) }
	team := func() *commonrl.RateLimitDescriptor { return descOf([][2]string{{"team", "t"}}) }
	runClassify(t, newModel(f, false, false, allDocumented()), []classifyStep{
		{name: "the same", req: rq(1, user()), erl: answer(okc, st(okc, 3, "", 2)), fg: answer(okc, st(okc, 3, "", 2)), want: "equal"},
		{name: "refused, both", req: rq(5, user()), erl: answer(overc, st(overc, 3, "", 0)), fg: answer(overc, st(overc, 3, "", 0)), want: "equal"},
		// ERL counted the 5 refused hits; the bucket did not.
		{name: "refused hits not counted", req: rq(1, user()), erl: answer(overc, st(overc, 3, "", 0)), fg: answer(okc, st(okc, 3, "", 1)), want: "documented", reason: "refused-free"},
		// Negative control: one token was left; fairgate claiming it
		// still has one is no documented difference.
		{name: "a token from nowhere", req: rq(1, user()), erl: answer(overc, st(overc, 3, "", 0)), fg: answer(okc, st(okc, 3, "", 1)), want: "undocumented"},
		// Negative control: a name ERL does not give.
		{name: "a name", req: rq(1, team()), erl: answer(okc, st(okc, 10, "", 9)), fg: answer(okc, st(okc, 10, "team", 9)), want: "undocumented", wantNote: "model: 10/MINUTE"},
		// All or nothing: the team had room, the user none.
		{name: "refused by the user", req: rq(1, team(), withHits(user(), 5)), erl: answer(overc, st(okc, 10, "", 8), st(overc, 3, "", 0)), fg: answer(overc, st(okc, 10, "", 9), st(overc, 3, "", 0)), want: "documented", reason: "all-or-nothing"},
		{name: "the team kept its token", req: rq(1, team()), erl: answer(okc, st(okc, 10, "", 7)), fg: answer(okc, st(okc, 10, "", 8)), want: "documented", reason: "all-or-nothing"},
	})

	// Negative control: the same difference, once docs/envoy.md no
	// longer states it, is undocumented.
	docs := allDocumented()
	delete(docs, "refused-free")
	runClassify(t, newModel(f, false, false, docs), []classifyStep{
		{name: "refused", req: rq(5, user()), erl: answer(overc, st(overc, 3, "", 0)), fg: answer(overc, st(overc, 3, "", 0)), want: "equal"},
		{name: "refused hits not counted, undocumented", req: rq(1, user()), erl: answer(overc, st(overc, 3, "", 0)), fg: answer(okc, st(okc, 3, "", 2)), want: "undocumented", wantNote: "not in docs/envoy.md"},
	})
}

// stReset is st with a duration_until_reset of reset seconds.
func stReset(code rlsv3.RateLimitResponse_Code, rpu uint32, remaining uint32, reset int64) *rlsv3.RateLimitResponse_DescriptorStatus {
	s := st(code, rpu, "", remaining)
	s.DurationUntilReset = durationpb.New(time.Duration(reset) * time.Second)
	return s
}

// TestERLDiffClassifyFixed: in the fixed pass (the calls start 20 s into
// a minute) fairgate's figures are ERL's: a window turned over in both is
// equal, a refused call that takes nothing stays documented; a token
// back within the window (what a bucket's refill would be), a wrong
// duration_until_reset and the bucket's reset are undocumented.
func TestERLDiffClassifyFixed(t *testing.T) {
	f, _ := parseERLFile([]byte(classifyConfig))
	user := func() *commonrl.RateLimitDescriptor { return descOf([][2]string{{"user", "a"}}) }
	fixed := func(docs map[string]bool) *model {
		m := newModel(f, false, false, docs)
		m.fixed = true
		return m
	}
	runClassify(t, fixed(allDocumented()), []classifyStep{
		{name: "the same", req: rq(1, user()), erl: answer(okc, stReset(okc, 3, 2, 40)), fg: answer(okc, stReset(okc, 3, 2, 40)), want: "equal"},
		{name: "refused, both", req: rq(5, user()), erl: answer(overc, stReset(overc, 3, 0, 40)), fg: answer(overc, stReset(overc, 3, 0, 40)), want: "equal"},
		{name: "refused hits not counted", req: rq(1, user()), erl: answer(overc, stReset(overc, 3, 0, 40)), fg: answer(okc, stReset(okc, 3, 1, 40)), want: "documented", reason: "refused-free"},
		{name: "the window's last", req: rq(1, user()), erl: answer(overc, stReset(overc, 3, 0, 40)), fg: answer(okc, stReset(okc, 3, 0, 40)), want: "documented", reason: "refused-free"},
		// Negative control: a window gives nothing back before its end.
		{name: "a token back in the window", advance: 20 * time.Second, req: rq(1, user()), erl: answer(overc, stReset(overc, 3, 0, 20)), fg: answer(okc, stReset(okc, 3, 0, 20)), want: "undocumented", wantNote: "model: OVER_LIMIT"},
	})
	runClassify(t, fixed(allDocumented()), []classifyStep{
		{name: "spent", req: rq(3, user()), erl: answer(okc, stReset(okc, 3, 0, 40)), fg: answer(okc, stReset(okc, 3, 0, 40)), want: "equal"},
		{name: "a new window, both", advance: 40 * time.Second, req: rq(1, user()), erl: answer(okc, stReset(okc, 3, 2, 60)), fg: answer(okc, stReset(okc, 3, 2, 60)), want: "equal"},
		// Negative controls: a reset that is not the window's end, and
		// a token bucket's answer to the same call (as the bucket pass
		// would get).
		{name: "a wrong reset", req: rq(1, user()), erl: answer(okc, stReset(okc, 3, 1, 60)), fg: answer(okc, stReset(okc, 3, 1, 59)), want: "undocumented", wantNote: "model: 60"},
		{name: "a bucket's figures", req: rq(1, user()), erl: answer(okc, stReset(okc, 3, 0, 60)), fg: answer(okc, stReset(okc, 3, 1, 20)), want: "undocumented"},
	})
}

// TestERLDiffClassifyRemembered: on a bucket an override in another
// unit shares, the Redis store's remembered refusal of the override is
// documented while its wait lasts, though a call under the configured
// limit refilled the bucket; the negative control, the same refusal with
// no refusal before it to remember, is undocumented.
func TestERLDiffClassifyRemembered(t *testing.T) {
	f, _ := parseERLFile([]byte(classifyConfig))
	user := func() *commonrl.RateLimitDescriptor { return descOf([][2]string{{"user", "a"}}) }
	hourly := func() *commonrl.RateLimitDescriptor {
		d := user()
		d.Limit = &commonrl.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5, Unit: typev3.RateLimitUnit_HOUR}
		return d
	}
	hour := func(code rlsv3.RateLimitResponse_Code, remaining uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		s := st(code, 5, "", remaining)
		s.CurrentLimit.Unit = rlsv3.RateLimitResponse_RateLimit_HOUR
		return s
	}
	spent := classifyStep{name: "spent", req: rq(3, user()), erl: answer(okc, st(okc, 3, "", 0)), fg: answer(okc, st(okc, 3, "", 0)), want: "equal"}
	refilled := classifyStep{name: "40 s on: two tokens back", advance: 40 * time.Second, req: rq(1, user()), erl: answer(okc, st(okc, 3, "", 2)), fg: answer(okc, st(okc, 3, "", 1)), want: "documented"}
	again := classifyStep{name: "the override again", req: rq(1, hourly()), erl: answer(okc, hour(okc, 3)), fg: answer(overc, hour(overc, 0)), want: "documented", reason: "remembered-denial"}
	runClassify(t, newModel(f, false, false, allDocumented()), []classifyStep{
		spent,
		{name: "an override per hour: no token", req: rq(1, hourly()), erl: answer(okc, hour(okc, 4)), fg: answer(overc, hour(overc, 0)), want: "documented", reason: "override-raise"},
		refilled, again,
	})
	again.want, again.reason = "undocumented", ""
	runClassify(t, newModel(f, false, false, allDocumented()), []classifyStep{spent, refilled, again})
}

// TestERLDiffClassifyCheckRefuses: on both stores a check (hits_addend 0)
// whose bucket holds less than one token is over, and enforced it refuses
// the request before anything is charged: the other descriptor is a bare
// OK (over or not) and keeps its token, which ERL counts. The negative
// controls, the same refusal by a check whose bucket has room and the
// refusal once the doc no longer states it, are undocumented.
func TestERLDiffClassifyCheckRefuses(t *testing.T) {
	f, _ := parseERLFile([]byte(classifyConfig))
	user := func() *commonrl.RateLimitDescriptor { return descOf([][2]string{{"user", "a"}}) }
	team := func() *commonrl.RateLimitDescriptor { return descOf([][2]string{{"team", "t"}}) }
	check := func() *commonrl.RateLimitDescriptor { return withHits(user(), 0) }
	runClassify(t, newModel(f, false, false, allDocumented()), []classifyStep{
		{name: "spent", req: rq(3, user()), erl: answer(okc, st(okc, 3, "", 0)), fg: answer(okc, st(okc, 3, "", 0)), want: "equal"},
		{name: "a check over refuses, the team not charged", req: rq(1, check(), team()),
			erl: answer(okc, st(okc, 3, "", 0), st(okc, 10, "", 9)), fg: answer(overc, st(overc, 3, "", 0), st(okc, 0, "", 0)),
			want: "documented", reason: "check-over"},
		{name: "the team kept its token", req: rq(1, team()), erl: answer(okc, st(okc, 10, "", 8)), fg: answer(okc, st(okc, 10, "", 9)), want: "documented", reason: "check-over"},
	})
	// The other descriptor over too: not asked, so a bare OK, where ERL
	// counts it over.
	runClassify(t, newModel(f, false, false, allDocumented()), []classifyStep{
		{name: "user spent", req: rq(3, user()), erl: answer(okc, st(okc, 3, "", 0)), fg: answer(okc, st(okc, 3, "", 0)), want: "equal"},
		{name: "team spent", req: rq(10, team()), erl: answer(okc, st(okc, 10, "", 0)), fg: answer(okc, st(okc, 10, "", 0)), want: "equal"},
		{name: "a check over refuses, the team not asked", req: rq(1, check(), team()),
			erl: answer(overc, st(okc, 3, "", 0), st(overc, 10, "", 0)), fg: answer(overc, st(overc, 3, "", 0), st(okc, 0, "", 0)),
			want: "documented", reason: "check-over"},
	})
	runClassify(t, newModel(f, false, false, allDocumented()), []classifyStep{
		{name: "a check with room refuses", req: rq(1, check(), team()),
			erl: answer(okc, st(okc, 3, "", 3), st(okc, 10, "", 9)), fg: answer(overc, st(overc, 3, "", 0), st(okc, 0, "", 0)),
			want: "undocumented"},
	})
	// Negative control: without the doc's sentence, the same refusal is
	// undocumented.
	docs := allDocumented()
	delete(docs, "check-over")
	runClassify(t, newModel(f, false, false, docs), []classifyStep{
		{name: "spent", req: rq(3, user()), erl: answer(okc, st(okc, 3, "", 0)), fg: answer(okc, st(okc, 3, "", 0)), want: "equal"},
		{name: "a check over refuses, undocumented", req: rq(1, check(), team()),
			erl: answer(okc, st(okc, 3, "", 0), st(okc, 10, "", 9)), fg: answer(overc, st(overc, 3, "", 0), st(okc, 0, "", 0)),
			want: "undocumented", wantNote: "check-over: not in docs/envoy.md"},
	})
}
