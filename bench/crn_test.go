package bench

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/demoapi"
	"github.com/fairgate/fairgate/shed"
)

// sentBy runs tenants' arrivals for 500 ms against a server that records
// each request's route and service-time draw by API key.
func sentBy(t *testing.T, tenants []TenantLoad) map[string][]string {
	t.Helper()
	var mu sync.Mutex
	got := map[string][]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		mu.Lock()
		got[key] = append(got[key], r.Method+" "+r.URL.Path+" z="+r.Header.Get(demoapi.JitterHeader))
		mu.Unlock()
	}))
	defer srv.Close()
	l := newLoad(srv.URL, tenants, 500*time.Millisecond, time.Second)
	defer l.close()
	l.run(context.Background(), 7)
	for _, reqs := range got {
		slices.Sort(reqs) // arrival order, not the order they reached the server
	}
	return got
}

// An innocent tenant sends the same requests, with the same service-time
// draws, in the quiet baseline (no noisy tenants) as in a mode's run, so
// that its p99 is compared over the same requests. The noisy tenant comes
// first: were the streams keyed by a tenant's place in the scenario, the
// innocents' would shift in the baseline, and this test would fail.
func TestInnocentsSendTheSameRequestsInTheBaseline(t *testing.T) {
	sc := Scenario{Tenants: []TenantLoad{
		{ID: "loud", Tier: "pro", Key: "loud-key", Role: Noisy, Rate: 40, Calls: []Call{weighted(export, 1)}, Users: 2, IPs: 1, Timeout: time.Second},
		innocentTenant("a", "pro", 40, 5, 1),
		innocentTenant("b", "starter", 40, 5, 1),
	}}
	run, quiet := sentBy(t, sc.Tenants), sentBy(t, sc.innocentOnly().Tenants)
	for _, tl := range sc.innocentOnly().Tenants {
		if len(run[tl.Key]) < 5 || !slices.Equal(run[tl.Key], quiet[tl.Key]) {
			t.Errorf("%s sent %d requests in the run and %d in the baseline, not the same ones:\nrun:      %v\nbaseline: %v",
				tl.ID, len(run[tl.Key]), len(quiet[tl.Key]), run[tl.Key], quiet[tl.Key])
		}
	}
	if slices.Equal(run["bench-a-key"], run["bench-b-key"]) {
		t.Errorf("tenants a and b sent the same requests: one stream for all")
	}
}

// The route mixes the tests' own tenants use (the built-in scenarios'
// are in their traffic files).
var (
	usersMe = Call{Method: "GET", Path: "/api/v1/users/me", Criticality: shed.Critical}
	search  = Call{Method: "GET", Path: "/api/v1/search", Criticality: shed.Default}
	export  = Call{Method: "POST", Path: "/api/v1/reports/export", Criticality: shed.Sheddable}
)

func weighted(c Call, w float64) Call { c.Weight = w; return c }

// innocentTenant is a well-behaved tenant: Poisson arrivals of reads and
// searches, a 2 s client timeout, Retry-After honoured.
func innocentTenant(id, tier string, rate float64, users, ips int) TenantLoad {
	return TenantLoad{ID: id, Tier: tier, Key: "bench-" + id + "-key", Role: Innocent, Rate: rate,
		Calls: []Call{weighted(usersMe, 70), weighted(search, 30)}, Users: users, IPs: ips, Timeout: 2 * time.Second, HonourRetryAfter: true}
}
