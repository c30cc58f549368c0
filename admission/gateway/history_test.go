package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fairgate/fairgate/admission"
	"github.com/fairgate/fairgate/deploy/examples"
	"github.com/fairgate/fairgate/internal/fakeclock"
)

// historyJSON is GET /admin/history as the console reads it.
type historyJSON struct {
	ResolutionSeconds int        `json:"resolution_seconds"`
	Samples           int        `json:"samples"`
	Last              *time.Time `json:"last"`
	Tenants           []struct {
		ID       string     `json:"id"`
		Last     *time.Time `json:"last"`
		Admitted []int64    `json:"admitted"`
		Rejected []int64    `json:"rejected"`
		Overload []int64    `json:"overload"`
		InFlight []int64    `json:"in_flight"`
	} `json:"tenants"`
	Pools []struct {
		Name          string    `json:"name"`
		InFlight      []int64   `json:"in_flight"`
		Seats         []int64   `json:"seats"`
		Queued        []int64   `json:"queued"`
		Admitted      []int64   `json:"admitted"`
		MeanWaitMs    []float64 `json:"mean_wait_ms"`
		ShedThreshold []int64   `json:"shed_threshold"`
	} `json:"pools"`
}

func getHistory(t *testing.T, url, query string) (historyJSON, string) {
	t.Helper()
	r := do(t, "GET", url+"/admin/history"+query, "", nil)
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /admin/history = %d %s %.200s", r.status, r.header.Get("Content-Type"), r.body)
	}
	var h historyJSON
	if err := json.Unmarshal([]byte(r.body), &h); err != nil {
		t.Fatalf("GET /admin/history: %v in %.200s", err, r.body)
	}
	return h, r.body
}

// TestHistoryAPI: GET /admin/history lists every demo tenant and pool,
// with empty series (arrays, not null) before the first sample, and after
// one the interval's admitted and rejected requests, stamped with the
// server's clock. The test stops the server's own sampling and steps it.
func TestHistoryAPI(t *testing.T) {
	clk := fakeclock.New()
	base, _, srv := startGateway(t, nil, Options{Now: clk.Now})
	srv.history.close() // the test samples by hand
	admin := httptest.NewServer(srv.AdminHandler())
	defer admin.Close()

	h, body := getHistory(t, admin.URL, "")
	if h.ResolutionSeconds != 10 || h.Samples != 90 || h.Last != nil || len(h.Tenants) != 3 || len(h.Pools) != 3 {
		t.Fatalf("before any sample: %s", body)
	}
	if strings.Contains(body, "null") || !strings.Contains(body, `"rejected":[]`) {
		t.Errorf("empty series must be [] (the page reads their length): %s", body)
	}

	const searches = 10 // initech's burst of 25 allows 5 at 5 tokens each
	for range searches {
		do(t, "GET", base+"/api/v1/search", "demo-starter-key", nil)
	}
	for range 2 {
		do(t, "GET", base+"/api/v1/users/me", "demo-enterprise-key", nil)
	}
	clk.Advance(admission.HistoryResolution)
	srv.history.h.Sample(clk.Now())

	h, body = getHistory(t, admin.URL, "")
	if strings.Contains(body, "\n  ") {
		t.Errorf("history JSON is indented; it is served compact: %.200s", body)
	}
	if h.Last == nil || !h.Last.Equal(clk.Now()) {
		t.Errorf("last = %v, want %v", h.Last, clk.Now())
	}
	admitted := int64(0)
	for _, th := range h.Tenants {
		if len(th.Admitted) != 1 || len(th.Rejected) != 1 || len(th.Overload) != 1 || len(th.InFlight) != 1 || th.Last == nil {
			t.Fatalf("tenant %s: %+v, want one sample of each series", th.ID, th)
		}
		admitted += th.Admitted[0]
		switch th.ID {
		case "initech":
			if th.Admitted[0]+th.Rejected[0] != searches || th.Rejected[0] == 0 {
				t.Errorf("initech: admitted %v, rejected %v; want %d in all, some rejected", th.Admitted, th.Rejected, searches)
			}
		case "acme":
			if th.Admitted[0] != 2 || th.Rejected[0] != 0 {
				t.Errorf("acme: admitted %v, rejected %v; want 2 and 0", th.Admitted, th.Rejected)
			}
		}
	}
	seated := int64(0)
	for _, p := range h.Pools {
		if len(p.InFlight) != 1 || len(p.Seats) != 1 || p.Seats[0] < 1 || len(p.ShedThreshold) != 1 {
			t.Errorf("pool %s: %+v, want one sample with seats", p.Name, p)
		}
		seated += p.Admitted[0]
	}
	if seated != admitted {
		t.Errorf("the pools seated %d requests, the tenants were admitted %d", seated, admitted)
	}
	if h, body := getHistory(t, admin.URL, "?tenant=acme"); len(h.Tenants) != 1 || h.Tenants[0].ID != "acme" || len(h.Pools) != 3 {
		t.Errorf("?tenant=acme: %.300s, want acme's series alone, and every pool's", body)
	}
}

// TestHistoryNeedsTheAdminToken: /admin/history is behind the admin
// listener's checks like the rest of the admin API.
func TestHistoryNeedsTheAdminToken(t *testing.T) {
	_, base := adminServer(t, demoWithAdmin("", "admin:\n  token: "+testAdminToken+"\n"), nil, Options{})
	if r := adminDo(t, nil, "GET", base+"/admin/history", "", nil, nil); r.status != http.StatusUnauthorized {
		t.Errorf("without the token: %d, want 401", r.status)
	}
	auth := http.Header{"Authorization": {"Bearer " + testAdminToken}}
	if r := adminDo(t, nil, "GET", base+"/admin/history", "", auth, nil); r.status != http.StatusOK {
		t.Errorf("with the token: %d %s, want 200", r.status, r.body)
	}
	if r := adminDo(t, nil, "GET", base+"/admin/history", "evil.example", auth, nil); r.status != http.StatusMisdirectedRequest {
		t.Errorf("with a foreign Host: %d, want 421", r.status)
	}
}

// TestHistorySampledFromNewToClose: the server samples every
// HistoryResolution from New, and Close stops it (synctest: the bubble
// would report the sampling goroutine were it left running).
func TestHistorySampledFromNewToClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := Parse(examples.Demo)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := New(cfg, Options{})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(2*admission.HistoryResolution + admission.HistoryResolution/2)
		synctest.Wait()
		v := srv.history.h.View("")
		if len(v.Tenants) != 3 || len(v.Tenants[0].Rejected) != 2 {
			t.Errorf("after 2.5 intervals: %d tenants, %d samples; want 3 and 2", len(v.Tenants), len(v.Tenants[0].Rejected))
		}
		if err := srv.Close(); err != nil {
			t.Fatal(err)
		}
		if err := srv.Close(); err != nil { // twice is fine
			t.Fatal(err)
		}
	})
}
