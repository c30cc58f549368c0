package admission

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fairgate/fairgate/internal/fakeclock"
)

// TestMiddlewareREDMetrics: the embedded middleware records each answer
// under its decision's labels, with the time on the gate's clock: a 201
// after 250 ms (request and upstream), a handler's panic as a 500 and an
// upstream call that got no answer (the handler is the upstream here), a
// 401 as rejected.
func TestMiddlewareREDMetrics(t *testing.T) {
	clk := fakeclock.New()
	g, reg := redGate(t, clk.Now)
	h := g.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("panic") != "" {
			panic("boom")
		}
		clk.Advance(250 * time.Millisecond)
		w.WriteHeader(http.StatusCreated)
	}))
	for _, c := range []struct {
		key, path string
		want      int
	}{
		{"start-key", "/api/v1/users/me", 201},
		{"start-key", "/api/v1/users/me?panic=1", 500},
		{"", "/api/v1/users/me", 401},
	} {
		r := httptest.NewRequest("GET", c.path, nil)
		if c.key != "" {
			r.Header.Set("Authorization", "Bearer "+c.key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != c.want {
			t.Fatalf("%s: %d, want %d", c.path, w.Code, c.want)
		}
	}
	got := gatherRED(t, reg)
	want := []string{
		`fairgate_request_duration_seconds{outcome="admitted",route="GET /api/v1/users/me",status_class="2xx",tier="starter"} 1 0.25`,
		`fairgate_request_duration_seconds{outcome="admitted",route="GET /api/v1/users/me",status_class="5xx",tier="starter"} 1 0`,
		`fairgate_request_duration_seconds{outcome="rejected",route="unmatched",status_class="4xx",tier=""} 1 0`,
		`fairgate_responses_total{code="201",tier="starter"} 1`,
		`fairgate_responses_total{code="401",tier=""} 1`,
		`fairgate_responses_total{code="500",tier="starter"} 1`,
		`fairgate_upstream_duration_seconds{route="GET /api/v1/users/me",status_class="2xx"} 1 0.25`,
		`fairgate_upstream_duration_seconds{route="GET /api/v1/users/me",status_class="error"} 1 0`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("RED series:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestREDRefusedAtUpstreamStart: a request the adaptive limit refused at
// the upstream call's start is rejected, though its decision admitted it;
// a failed upstream call is of status class error.
func TestREDRefusedAtUpstreamStart(t *testing.T) {
	g, reg := redGate(t, time.Now)
	d, err := g.Check(t.Context(), req("start-key", "GET", "/api/v1/users/me"))
	if err != nil || !d.Allowed {
		t.Fatalf("%+v %v", d, err)
	}
	rm := g.StartRequest()
	rm.Decided(&d)
	if !rm.labels.admitted {
		t.Fatal("an admitted decision recorded as rejected")
	}
	d.lease.Release()
	d.lease.refused = true // as StartUpstream leaves it when the limit is reached
	rm.Decided(&d)
	rm.Answered(503)
	rm.Answered(503) // recorded once

	d, _ = g.Check(t.Context(), req("start-key", "GET", "/api/v1/users/me"))
	d.Lease().StartUpstream(t.Context())
	d.Lease().UpstreamFailed()
	d.Lease().AnsweredStatus(200) // after the release: nothing
	got := gatherRED(t, reg)
	want := []string{
		`fairgate_request_duration_seconds{outcome="rejected",route="GET /api/v1/users/me",status_class="5xx",tier="starter"} 1`,
		`fairgate_responses_total{code="503",tier="starter"} 1`,
		`fairgate_upstream_duration_seconds{route="GET /api/v1/users/me",status_class="error"} 1`,
	}
	for i, s := range got { // the durations are real time here: no sums
		if strings.Contains(s, "_duration_") {
			got[i] = s[:strings.LastIndexByte(s, ' ')]
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("RED series:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// redGate is a gate on testConfig with metrics on a registry of its own.
func redGate(t *testing.T, now func() time.Time) (*Gate, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(testConfig(), testRegistry(t), Options{Now: now, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	return g, reg
}

// gatherRED is every series of the RED families on reg, as `name{labels}
// count [sum]`, sorted.
func gatherRED(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "fairgate_re") && !strings.HasPrefix(mf.GetName(), "fairgate_upstream") ||
			mf.GetName() == "fairgate_rejections_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			s := fmt.Sprintf("%s{%s} ", mf.GetName(), strings.Join(labels, ","))
			if h := m.GetHistogram(); h != nil {
				s += fmt.Sprintf("%d %g", h.GetSampleCount(), h.GetSampleSum())
			} else {
				s += fmt.Sprintf("%g", m.GetCounter().GetValue())
			}
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return out
}

// BenchmarkREDRequest is what the RED metrics add to a request: its
// record (two clock reads, a cached series, a histogram observation and a
// counter), and an upstream call's.
func BenchmarkREDRequest(b *testing.B) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		b.Fatal(err)
	}
	g, err := New(testConfig(), testRegistry(b), Options{Metrics: m}) // the real clock, as in a server
	if err != nil {
		b.Fatal(err)
	}
	d, err := g.Check(b.Context(), req("ent-key", "GET", "/api/v1/users/me"))
	if err != nil || !d.Allowed {
		b.Fatal(d, err)
	}
	defer d.lease.Release()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			r := g.StartRequest()
			r.Decided(&d)
			r.Answered(200)
			m.red.upstreamCall(d.Route.Name, 200, time.Millisecond)
		}
	})
}

// TestNativeHistogramsOptIn: the duration histograms are classic alone by
// default, and native too with MetricsOptions.NativeHistograms.
func TestNativeHistogramsOptIn(t *testing.T) {
	for _, native := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		m, err := NewMetricsWith(reg, MetricsOptions{NativeHistograms: native})
		if err != nil {
			t.Fatal(err)
		}
		m.red.request(requestLabels{tier: "t", route: "r", admitted: true, code: 200}, 3*time.Millisecond)
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "fairgate_request_duration_seconds" {
				continue
			}
			h := mf.GetMetric()[0].GetHistogram()
			if got := len(h.GetPositiveSpan()) > 0; got != native || len(h.GetBucket()) != len(redBuckets) {
				t.Errorf("native %v: native spans %v, %d classic buckets; want native %v and %d classic", native, got, len(h.GetBucket()), native, len(redBuckets))
			}
		}
	}
}
