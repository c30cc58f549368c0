package gateway

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// redUpstream answers ?status=503 with a 503 and ?drop=1 by closing the
// connection unanswered; "hello" otherwise.
func redUpstream(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Query().Get("status") == "503":
		w.WriteHeader(http.StatusServiceUnavailable)
	case r.URL.Query().Get("drop") == "1":
		c, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			c.Close()
		}
	default:
		io.WriteString(w, "hello")
	}
}

// checkREDMetrics sends one of each kind of answer (admitted 200s, an
// upstream's 503, an upstream that hangs up, a 401, an admitted export
// and a 429, the edge's own 413) and reads the RED families: each answer
// once, under the labels the reference engine gives it, on every engine.
func checkREDMetrics(base string, _ *recorder, s *Server) error {
	send := func(method, path, key string, want int) error {
		req, _ := http.NewRequest(method, base+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			return fmt.Errorf("%s %s: %d, want %d", method, path, resp.StatusCode, want)
		}
		return nil
	}
	const key = "demo-starter-key" // burst 25
	for _, c := range []struct {
		method, path, key string
		want              int
	}{
		{"GET", "/api/v1/users/me", key, 200},
		{"GET", "/api/v1/users/me", key, 200},
		{"GET", "/api/v1/users/me", key, 200},
		{"GET", "/api/v1/users/me?status=503", key, 503},
		{"GET", "/api/v1/users/me?drop=1", key, 502},
		{"GET", "/api/v1/users/me", "", 401},
		{"POST", "/api/v1/reports/export", key, 200}, // the last 20 tokens
		{"POST", "/api/v1/reports/export", key, 429},
	} {
		if err := send(c.method, c.path, c.key, c.want); err != nil {
			return err
		}
	}
	resp, err := rawTo(base, "POST /api/v1/users/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+key+
		"\r\nContent-Length: 4194304\r\n\r\n-")
	if err != nil {
		return err
	}
	if resp.StatusCode != 413 {
		return fmt.Errorf("4 MiB announced: %d, want 413", resp.StatusCode)
	}
	got, err := redSeries(s)
	if err != nil {
		return err
	}
	want := []string{
		`fairgate_request_duration_seconds{outcome="admitted",route="GET /api/v1/users/me",status_class="2xx",tier="starter"} 3`,
		`fairgate_request_duration_seconds{outcome="admitted",route="GET /api/v1/users/me",status_class="5xx",tier="starter"} 2`,
		`fairgate_request_duration_seconds{outcome="rejected",route="unmatched",status_class="4xx",tier=""} 1`,
		`fairgate_request_duration_seconds{outcome="admitted",route="POST /api/v1/reports/export",status_class="2xx",tier="starter"} 1`,
		`fairgate_request_duration_seconds{outcome="rejected",route="POST /api/v1/reports/export",status_class="4xx",tier="starter"} 1`,
		`fairgate_request_duration_seconds{outcome="rejected",route="",status_class="4xx",tier=""} 1`,
		`fairgate_responses_total{code="200",tier="starter"} 4`,
		`fairgate_responses_total{code="503",tier="starter"} 1`,
		`fairgate_responses_total{code="502",tier="starter"} 1`,
		`fairgate_responses_total{code="401",tier=""} 1`,
		`fairgate_responses_total{code="429",tier="starter"} 1`,
		`fairgate_responses_total{code="413",tier=""} 1`,
		`fairgate_upstream_duration_seconds{route="GET /api/v1/users/me",status_class="2xx"} 3`,
		`fairgate_upstream_duration_seconds{route="GET /api/v1/users/me",status_class="5xx"} 1`,
		`fairgate_upstream_duration_seconds{route="GET /api/v1/users/me",status_class="error"} 1`,
		`fairgate_upstream_duration_seconds{route="POST /api/v1/reports/export",status_class="2xx"} 1`,
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		return fmt.Errorf("RED series:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	return nil
}

// redSeries is every series of the RED families on s's registry, as
// `name{labels} count`, sorted.
func redSeries(s *Server) ([]string, error) {
	mfs, err := s.Metrics().Gather()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, mf := range mfs {
		switch mf.GetName() {
		case "fairgate_request_duration_seconds", "fairgate_upstream_duration_seconds", "fairgate_responses_total":
		default:
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			out = append(out, fmt.Sprintf("%s{%s} %d", mf.GetName(), strings.Join(labels, ","), sampleCount(m)))
		}
	}
	slices.Sort(out)
	return out, nil
}

func sampleCount(m *dto.Metric) uint64 {
	if h := m.GetHistogram(); h != nil {
		return h.GetSampleCount()
	}
	return uint64(m.GetCounter().GetValue())
}
