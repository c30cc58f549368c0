package gateway

import (
	"cmp"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/fairgate/fairgate/admission"
)

// settledRoutes adds the routes checkSettled sends, and makes the starter
// tier's bucket 100 tokens refilled at one a thousand seconds, so that
// what a settlement charged shows in RateLimit-Remaining.
func settledRoutes(c *Config) {
	c.Admission.Routes = append([]admission.RouteConfig{
		{Method: "POST", Path: "/v1/complete", Settle: &admission.SettleConfig{From: "header", Name: "X-Usage-Tokens", Reserve: 2, Max: 50}},
		{Method: "POST", Path: "/v1/stream", Settle: &admission.SettleConfig{From: "trailer", Name: "X-Usage-Tokens", Reserve: 2}},
		{Method: "POST", Path: "/login", Cost: 3, ChargeOnStatus: []admission.StatusRange{{Lo: 401, Hi: 401}}},
	}, c.Admission.Routes...)
	tc := c.Tenants.Tiers["starter"]
	tc.Rate, tc.Burst = 0.001, 100
	c.Tenants.Tiers["starter"] = tc
}

// settledUpstream answers /v1/complete with its usage in a header (12, or
// ?used=N), /v1/stream with a chunked body and its usage in a trailer (7),
// /login with the status it is asked for.
func settledUpstream(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/complete":
		w.Header().Set("X-Usage-Tokens", cmp.Or(r.URL.Query().Get("used"), "12"))
		io.WriteString(w, "done")
	case "/v1/stream":
		w.Header().Set("Trailer", "X-Usage-Tokens")
		io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		io.WriteString(w, "data: two\n\n")
		w.Header().Set("X-Usage-Tokens", "7")
	case "/login":
		if r.URL.Query().Get("fail") == "1" {
			w.WriteHeader(http.StatusUnauthorized)
		}
	default:
		io.WriteString(w, "hello")
	}
}

// checkSettled: a settled route charges what the upstream's header or
// trailer says it used (within max), and a charge_on_status route only
// its failures; each shows in the next answer's RateLimit-Remaining.
func checkSettled(base string, _ *recorder) error {
	remaining := 100.0
	for _, c := range []struct {
		path    string
		status  int
		charged float64
	}{
		{"/v1/complete", 200, 12},
		{"/v1/stream", 200, 7},
		{"/v1/complete?used=500", 200, 50}, // max
		{"/login", 200, 0},
		{"/login?fail=1", 401, 3},
	} {
		req, err := http.NewRequest("POST", base+c.path, strings.NewReader("q"))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer demo-starter-key")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status {
			return fmt.Errorf("%s: %d %s", c.path, resp.StatusCode, body)
		}
		remaining -= c.charged
		// The next answer's remaining: the settlement is made once the
		// answer is whole, so ask again (a cheap GET of 1 token).
		probe, err := http.NewRequest("GET", base+"/api/v1/users/me", nil)
		if err != nil {
			return err
		}
		probe.Header.Set("Authorization", "Bearer demo-starter-key")
		pr, err := http.DefaultClient.Do(probe)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, pr.Body)
		pr.Body.Close()
		remaining--
		if got, want := pr.Header.Get("RateLimit-Remaining"), fmt.Sprint(int(remaining)); got != want {
			return fmt.Errorf("after %s (charged %v): RateLimit-Remaining %s, want %s", c.path, c.charged, got, want)
		}
	}
	return nil
}
