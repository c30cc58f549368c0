package gateway

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

// getJSON decodes GET url's JSON body into a map.
func getJSON(t *testing.T, url string) map[string]any {
	t.Helper()
	r := do(t, "GET", url, "", nil)
	if r.status != 200 {
		t.Fatalf("GET %s = %d %s", url, r.status, r.body)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(r.body), &m); err != nil {
		t.Fatalf("GET %s: %v in %s", url, err, r.body)
	}
	return m
}

func TestConsoleAPI(t *testing.T) {
	ring := NewTraceRing(0)
	tp := NewConsoleTracerProvider(ring)
	t.Cleanup(func() { tp.Shutdown(t.Context()) })
	base, _, srv := startGateway(t, func(c *Config) { c.Admin.JaegerUIURL = "http://jaeger.example:16686" },
		Options{TracerProvider: tp, Traces: ring})
	admin := httptest.NewServer(srv.AdminHandler())
	defer admin.Close()

	getJSON(t, admin.URL+"/admin/rejections")               // someone watches from now on
	do(t, "GET", base+"/api/v1/users/me", "not-a-key", nil) // 401
	var rejected response
	for range 10 { // the starter's burst is 25 tokens, a search costs 5
		if r := do(t, "GET", base+"/api/v1/search", "demo-starter-key", nil); r.status == 429 {
			rejected = r
		}
	}
	if rejected.status != 429 {
		t.Fatal("no 429 after 10 searches from the starter key")
	}
	reqID := rejected.header.Get("X-Request-Id")

	all := getJSON(t, admin.URL+"/admin/tenants")
	if un := all["unauthenticated_rejections_last_minute"].(map[string]any); un["identify"] != 1.0 {
		t.Errorf("unauthenticated rejections = %v, want identify 1", un)
	}
	tenants := all["tenants"].([]any)
	if len(tenants) != 3 {
		t.Fatalf("%d tenants, want 3", len(tenants))
	}
	var initech map[string]any
	for _, x := range tenants {
		if m := x.(map[string]any); m["id"] == "initech" {
			initech = m
		}
	}
	rl := initech["rejections_last_minute"].(map[string]any)
	if rl["rate"].(float64) < 1 || rl["shed"].(float64) != 0 {
		t.Errorf("initech rejections_last_minute = %v, want rate ≥ 1 and no shed", rl)
	}
	for _, k := range []string{"tier", "tokens", "burst", "in_flight", "max_concurrent", "pool", "pool_use", "pool_stats"} {
		if _, ok := initech[k]; !ok {
			t.Errorf("tenant JSON lacks %q: %v", k, initech)
		}
	}
	one := getJSON(t, admin.URL+"/admin/tenants/initech")
	if one["tier"] != "starter" || one["burst"].(float64) != 25 {
		t.Errorf("/admin/tenants/initech = %v", one)
	}
	ps := one["pool_stats"].(map[string]any)
	for _, k := range []string{"seats", "borrowed", "lent", "queued", "queue_length", "mean_wait_ms", "mean_hold_ms", "shed_threshold"} {
		if _, ok := ps[k]; !ok {
			t.Errorf("pool_stats lacks %q: %v", k, ps)
		}
	}
	for k := range ps {
		if strings.ContainsAny(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
			t.Errorf("pool_stats field %q is not snake_case", k)
		}
	}

	pools := getJSON(t, admin.URL+"/admin/pools")
	if got := len(pools["pools"].([]any)); got != 3 {
		t.Errorf("%d pools, want 3", got)
	}
	if ad, ok := pools["adaptive"].(map[string]any); !ok || ad["limit"].(float64) < 4 {
		t.Errorf("adaptive = %v, want the demo's limit", pools["adaptive"])
	}
	if _, ok := pools["shed_floor"]; !ok {
		t.Errorf("pools JSON lacks shed_floor: %v", pools)
	}

	recent := getJSON(t, admin.URL+"/admin/rejections")["rejections"].([]any)
	if len(recent) == 0 {
		t.Fatal("no recent rejections while watched")
	}
	last := recent[0].(map[string]any)
	if last["request_id"] != reqID || last["layer"] != "rate" || last["tenant"] != "initech" || last["trace_id"] == "" {
		t.Errorf("latest rejection = %v, want initech's %s by rate with a trace ID", last, reqID)
	}

	for _, id := range []string{reqID, last["trace_id"].(string)} {
		tr := getJSON(t, admin.URL+"/admin/traces/"+id)
		if tr["rejected_by"] != "rate" || tr["request_id"] != reqID {
			t.Fatalf("trace %s = %v", id, tr)
		}
		saidNo := ""
		for _, s := range tr["spans"].([]any) {
			if s := s.(map[string]any); s["said_no"] == true {
				saidNo = s["name"].(string)
			}
		}
		if saidNo != "admission.rate" {
			t.Errorf("span that said no = %q, want admission.rate", saidNo)
		}
	}
	if r := do(t, "GET", admin.URL+"/admin/traces/nope", "", nil); r.status != 404 {
		t.Errorf("unknown trace: %d, want 404", r.status)
	}
	if info := getJSON(t, admin.URL+"/admin/console"); info["jaeger_ui_url"] != "http://jaeger.example:16686" || info["traces"] != true {
		t.Errorf("/admin/console = %v", info)
	}
	page := do(t, "GET", admin.URL+"/", "", nil)
	if page.status != 200 || !strings.Contains(page.body, "fairgate console") {
		t.Errorf("GET / = %d %.100s", page.status, page.body)
	}
	for _, asset := range []string{"/console/console.js", "/console/console.css"} {
		if r := do(t, "GET", admin.URL+asset, "", nil); r.status != 200 {
			t.Errorf("GET %s = %d", asset, r.status)
		}
	}
}

// TestRecentRejectionsKeptUnwatched: nobody looked at the console, yet
// the latest rejections are there for whoever opens it after the flood,
// newest first, as many as admin.recent_rejections keeps. (Before, an
// unwatched gateway recorded none.)
func TestRecentRejectionsKeptUnwatched(t *testing.T) {
	base, _, srv := startGateway(t, func(c *Config) { c.Admin.RecentRejections = 5 }, Options{})
	var ids []string
	for range 12 {
		if r := do(t, "GET", base+"/api/v1/search", "demo-starter-key", nil); r.status == 429 {
			ids = append(ids, r.header.Get("X-Request-Id"))
		}
	}
	got := srv.Gate().RecentRejections(100)
	if len(ids) < 5 || len(got) != 5 {
		t.Fatalf("%d rejected, %d kept; want at least 5 and exactly 5", len(ids), len(got))
	}
	for i, r := range got {
		if want := ids[len(ids)-1-i]; r.RequestID != want || r.Tenant != "initech" || r.Tier != "starter" ||
			r.Route != "GET /api/v1/search" || r.Layer != "rate" || r.Reason != "tenant_quota" || r.Status != 429 {
			t.Errorf("rejection %d: %+v, want request %s of initech's 429s", i, r, want)
		}
	}
	st, _ := srv.Gate().TenantState("initech")
	if st.RejectionsLastMinute["rate"] < 1 {
		t.Errorf("rate rejections last minute = %d, want ≥ 1", st.RejectionsLastMinute["rate"])
	}
}
