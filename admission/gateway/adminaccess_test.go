package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/deploy/examples"
	"github.com/fairgate/fairgate/internal/fakeclock"
)

const testAdminToken = "0123456789abcdef-admin-token"

// demoWithAdmin is the demo config with its admin_listen replaced by bind
// (kept when empty) and extra appended: the file an operator would write.
func demoWithAdmin(bind, extra string) []byte {
	s := string(examples.Demo)
	if bind != "" {
		s = strings.Replace(s, "admin_listen: 127.0.0.1:9090", "admin_listen: "+strconv.Quote(bind), 1)
	}
	return []byte(s + "\n" + extra)
}

// adminServer builds the demo gateway from data with mutate applied, and
// serves its admin handler on a real loopback listener; it returns the
// server and the listener's base URL.
func adminServer(t *testing.T, data []byte, mutate func(*Config), o Options) (*Server, string) {
	t.Helper()
	cfg, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Upstream = "http://127.0.0.1:1" // the admin listener never calls it
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := New(cfg, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	adm := httptest.NewServer(srv.AdminHandler())
	t.Cleanup(adm.Close)
	return srv, adm.URL
}

// adminDo sends method target with Host host (the URL's when empty), the
// headers and the form body (none when nil) through client (the default
// when nil), without following redirects.
func adminDo(t *testing.T, client *http.Client, method, target, host string, hdr http.Header, form url.Values) response {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, target, body)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if client == nil {
		client = &http.Client{}
	}
	c := *client
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, string(b)}
}

func bearer(token string) http.Header { return http.Header{"Authorization": {"Bearer " + token}} }

// refusalWord is the "error" of an access refusal's JSON body.
func refusalWord(t *testing.T, r response) string {
	t.Helper()
	var m adminRefusal
	if err := json.Unmarshal([]byte(r.body), &m); err != nil || m.Message == "" {
		t.Fatalf("body %q is not an admin refusal: %v", r.body, err)
	}
	return m.Error
}

// TestAdminHostCheck: an admin listener on loopback answers only loopback
// Host names and admin.allowed_hosts; any other Host (a page that rebound
// its own name to 127.0.0.1) gets 421 and nothing else, health included.
// The negative control serves the same mux without the check: it gives
// the attacker the tenants, so the check is what refuses.
func TestAdminHostCheck(t *testing.T) {
	srv, base := adminServer(t, demoWithAdmin("", "admin:\n  allowed_hosts: [Fairgate-Admin.internal, 192.0.2.7]\n"), nil, Options{})
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(base, "http://"))
	for _, tc := range []struct {
		host string
		want int
	}{
		{"attacker.example:" + port, 421},
		{"attacker.example", 421},
		{"localhost.attacker.example:" + port, 421},
		{"127.0.0.1.attacker.example:" + port, 421},
		{"evil.localhost:" + port, 421}, // subdomains of localhost only when listed
		{"10.0.0.5:" + port, 421},
		{"fairgate-admin.internal.attacker.example", 421},
		{"localhost:" + port, 200},
		{"LocalHost", 200},
		{"localhost.:" + port, 200},
		{"127.0.0.1:" + port, 200},
		{"127.9.8.7", 200},
		{"[::1]:" + port, 200},
		{"[::1]", 200},
		{"[::ffff:127.0.0.1]:" + port, 200},
		{"fairgate-admin.INTERNAL:" + port, 200}, // allowed, without case
		{"192.0.2.7:" + port, 200},
	} {
		for _, path := range []string{"/admin/tenants", "/healthz"} {
			r := adminDo(t, nil, "GET", base+path, tc.host, nil, nil)
			if r.status != tc.want {
				t.Errorf("GET %s Host %q = %d, want %d", path, tc.host, r.status, tc.want)
				continue
			}
			if tc.want == 421 {
				if w := refusalWord(t, r); w != "misdirected_request" || strings.Contains(r.body, "initech") {
					t.Errorf("Host %q: 421 body %s", tc.host, r.body)
				}
			}
		}
	}

	// A listener on [::1] itself, asked by its own address.
	if ln, err := net.Listen("tcp", "[::1]:0"); err == nil {
		six := httptest.NewUnstartedServer(srv.AdminHandler())
		six.Listener.Close()
		six.Listener = ln
		six.Start()
		defer six.Close()
		if r := adminDo(t, nil, "GET", six.URL+"/admin/tenants", "", nil, nil); r.status != 200 {
			t.Errorf("GET on [::1] by its address = %d %s", r.status, r.body)
		}
	} else {
		t.Logf("no [::1] listener here (%v): its own-address case is not run", err)
	}

	// Negative control: the same mux without the check serves the
	// attacker's Host.
	bare := httptest.NewServer(srv.admin.next)
	defer bare.Close()
	if r := adminDo(t, nil, "GET", bare.URL+"/admin/tenants", "attacker.example:9090", nil, nil); r.status != 200 || !strings.Contains(r.body, "initech") {
		t.Errorf("without the check: %d %s; want the tenants (else this test proves nothing)", r.status, r.body)
	}
}

// TestAdminNonLoopbackBindAnswersAnyHost: off loopback the token, not the
// Host, guards the listener (kubelet and Prometheus ask for the pod IP):
// any Host with the token is served, none without it.
func TestAdminNonLoopbackBindAnswersAnyHost(t *testing.T) {
	_, base := adminServer(t, demoWithAdmin("0.0.0.0:9090", "admin:\n  token: "+testAdminToken+"\n"), nil, Options{})
	if r := adminDo(t, nil, "GET", base+"/admin/tenants", "attacker.example:9090", bearer(testAdminToken), nil); r.status != 200 {
		t.Errorf("with the token = %d %s", r.status, r.body)
	}
	if r := adminDo(t, nil, "GET", base+"/admin/tenants", "attacker.example:9090", nil, nil); r.status != 401 {
		t.Errorf("without the token = %d %s", r.status, r.body)
	}
	if r := adminDo(t, nil, "GET", base+"/readyz", "10.1.2.3:9090", nil, nil); r.status != 200 {
		t.Errorf("a probe to the pod IP = %d %s", r.status, r.body)
	}
}

// TestAdminToken: with admin.token every admin request but /healthz and
// /readyz needs it as a bearer token, on a loopback bind too; a missing or
// wrong one gets 401 with a Bearer challenge and a JSON body. The
// negative control, the same server without a token, serves everyone.
func TestAdminToken(t *testing.T) {
	_, base := adminServer(t, demoWithAdmin("", "admin:\n  token: "+testAdminToken+"\n"), nil, Options{})
	for _, tc := range []struct {
		name, path string
		hdr        http.Header
		want       int
		challenge  string // the WWW-Authenticate of a 401
	}{
		{"none", "/admin/tenants", nil, 401, `Bearer realm="fairgate admin"`},
		{"wrong", "/admin/tenants", bearer("0123456789abcdef-admin-tokex"), 401, `Bearer realm="fairgate admin", error="invalid_token"`},
		{"prefix", "/admin/tenants", bearer(testAdminToken[:16]), 401, `Bearer realm="fairgate admin", error="invalid_token"`},
		{"longer", "/admin/tenants", bearer(testAdminToken + "x"), 401, `Bearer realm="fairgate admin", error="invalid_token"`},
		{"basic", "/admin/tenants", http.Header{"Authorization": {"Basic " + testAdminToken}}, 401, `Bearer realm="fairgate admin", error="invalid_token"`},
		{"right", "/admin/tenants", bearer(testAdminToken), 200, ""},
		{"scheme without case", "/admin/tenants", http.Header{"Authorization": {"bearer " + testAdminToken}}, 200, ""},
		{"metrics none", "/metrics", nil, 401, `Bearer realm="fairgate admin"`},
		{"metrics right", "/metrics", bearer(testAdminToken), 200, ""},
		{"console none", "/console/console.js", nil, 401, `Bearer realm="fairgate admin"`},
		{"unknown path none", "/admin/nothing", nil, 401, `Bearer realm="fairgate admin"`},
		{"healthz none", "/healthz", nil, 200, ""},
		{"readyz none", "/readyz", nil, 200, ""},
		{"readyz wrong", "/readyz", bearer("wrong"), 200, ""},
	} {
		r := adminDo(t, nil, "GET", base+tc.path, "", tc.hdr, nil)
		if r.status != tc.want {
			t.Errorf("%s: GET %s = %d, want %d", tc.name, tc.path, r.status, tc.want)
			continue
		}
		if tc.want == 401 {
			if got := r.header.Get("WWW-Authenticate"); got != tc.challenge {
				t.Errorf("%s: WWW-Authenticate %q, want %q", tc.name, got, tc.challenge)
			}
			if w := refusalWord(t, r); w != "unauthorized" || strings.Contains(r.body, "initech") {
				t.Errorf("%s: 401 body %s", tc.name, r.body)
			}
		}
	}
	_, open := adminServer(t, demoWithAdmin("", ""), nil, Options{})
	if r := adminDo(t, nil, "GET", open+"/admin/tenants", "", nil, nil); r.status != 200 {
		t.Errorf("without admin.token: %d, want 200 (else the 401s above prove nothing)", r.status)
	}
}

// TestAdminTokenRequiredOffLoopback: a config whose admin_listen is not a
// loopback address and that sets no token is refused at load, by name.
func TestAdminTokenRequiredOffLoopback(t *testing.T) {
	for _, tc := range []struct {
		bind     string
		required bool
	}{
		{"127.0.0.1:9090", false}, {"127.3.4.5:9090", false}, {"[::1]:9090", false},
		{"localhost:9090", false}, {"LOCALHOST:9090", false}, {"[::ffff:127.0.0.1]:9090", false},
		{":9090", true}, {"0.0.0.0:9090", true}, {"[::]:9090", true}, {"192.0.2.1:9090", true},
		{"[2001:db8::1]:9090", true}, {"fairgate-admin:9090", true}, {"localhost.example:9090", true},
		{"admin.localhost:9090", true},
	} {
		_, err := Parse(demoWithAdmin(tc.bind, ""))
		if got := err != nil && strings.Contains(err.Error(), "admin.token: required") && strings.Contains(err.Error(), strconv.Quote(tc.bind)); got != tc.required {
			t.Errorf("admin_listen %s without a token: %v; want refused %v", tc.bind, err, tc.required)
		}
		if _, err := Parse(demoWithAdmin(tc.bind, "admin:\n  token: "+testAdminToken+"\n")); err != nil {
			t.Errorf("admin_listen %s with a token: %v", tc.bind, err)
		}
	}
	// The default, loopback, needs none.
	if _, err := Parse([]byte(strings.Replace(string(examples.Demo), "admin_listen: 127.0.0.1:9090\n", "", 1))); err != nil {
		t.Errorf("default admin_listen: %v", err)
	}
	// `fairgate rls` checks the same, and names the file.
	path := filepath.Join(t.TempDir(), "rls.yaml")
	os.WriteFile(path, []byte("admin_listen: 0.0.0.0:9090\nrls:\n  configs: [a.yaml]\n"), 0o600)
	if _, err := LoadRLS(path); err == nil || !strings.Contains(err.Error(), path+": admin.token: required") {
		t.Errorf("rls on 0.0.0.0 without a token: %v", err)
	}
}

// TestAdminTokenFile: admin.token_file is read at load, trimmed; a
// missing, empty or weak file, both token fields, and allowed hosts that
// cannot apply are refused by name.
func TestAdminTokenFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	os.WriteFile(file, []byte("\n  "+testAdminToken+"  \n"), 0o600)
	_, base := adminServer(t, demoWithAdmin("0.0.0.0:9090", "admin:\n  token_file: "+file+"\n"), nil, Options{})
	if r := adminDo(t, nil, "GET", base+"/admin/pools", "", bearer(testAdminToken), nil); r.status != 200 {
		t.Errorf("the file's token, trimmed: %d %s", r.status, r.body)
	}

	empty, short := filepath.Join(dir, "empty"), filepath.Join(dir, "short")
	os.WriteFile(empty, []byte(" \n"), 0o600)
	os.WriteFile(short, []byte("abc\n"), 0o600)
	for _, tc := range []struct{ bind, admin, want string }{
		{"0.0.0.0:9090", "token_file: " + filepath.Join(dir, "missing"), "admin.token_file: open " + filepath.Join(dir, "missing")},
		{"0.0.0.0:9090", "token_file: " + empty, "admin.token_file: " + empty + " is empty"},
		{"0.0.0.0:9090", "token_file: " + short, "admin.token_file: the token in " + short + " must be at least 16 characters"},
		{"", "{token: " + testAdminToken + ", token_file: " + file + "}", "admin.token, admin.token_file: set one, not both"},
		{"", "token: short", "admin.token: must be at least 16 characters"},
		{"", `token: "0123456789 abcdef"`, "admin.token: must be printable ASCII without spaces"},
		{"0.0.0.0:9090", "{token: " + testAdminToken + ", allowed_hosts: [admin.example]}", "admin.allowed_hosts: only for a loopback admin_listen"},
		{"", "allowed_hosts: [admin.example:9090]", `admin.allowed_hosts[0]: "admin.example:9090" is not a host name`},
		{"", "allowed_hosts: [ok.example, '*.example']", `admin.allowed_hosts[1]: "*.example" is not a host name`},
		{"", "allowed_hosts: ['http://admin.example']", `admin.allowed_hosts[0]: "http://admin.example" is not a host name`},
	} {
		if _, err := Parse(demoWithAdmin(tc.bind, "admin:\n  "+tc.admin+"\n")); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("admin %s: %v, want %q", tc.admin, err, tc.want)
		}
	}
}

// TestAdminReload: a reload applies a new token (the file is read again)
// at once; one that would leave a non-loopback listener without a token
// is refused, also when it moves admin_listen to loopback, which needs a
// restart; the token in force stays.
func TestAdminReload(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	os.WriteFile(file, []byte(testAdminToken), 0o600)
	data := demoWithAdmin("0.0.0.0:9090", "admin:\n  token_file: "+file+"\n")
	srv, base := adminServer(t, data, nil, Options{})
	cfg, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Upstream = srv.Config().Upstream
	status := func(token string) int {
		return adminDo(t, nil, "GET", base+"/admin/pools", "", bearer(token), nil).status
	}
	const next = "fedcba9876543210-next-token"
	os.WriteFile(file, []byte(next+"\n"), 0o600)
	if status(testAdminToken) != 200 {
		t.Fatal("the file alone changed the token; it is read at load and reload")
	}
	if err := srv.Reload(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	if old, new := status(testAdminToken), status(next); old != 401 || new != 200 {
		t.Errorf("after reload: old token %d, new %d; want 401, 200", old, new)
	}

	loop := cfg
	loop.AdminListen, loop.Admin = "127.0.0.1:9090", AdminConfig{}
	err = srv.Reload(t.Context(), loop)
	if err == nil || !strings.Contains(err.Error(), "admin.token: required") || !strings.Contains(err.Error(), "admin_listen changes need a restart") {
		t.Errorf("reload dropping the token of the 0.0.0.0 listener: %v", err)
	}
	if status(next) != 200 || status("") != 401 {
		t.Error("a refused reload changed the admin access")
	}
}

// TestConsoleLogin: with a token, a browser asking for the console gets
// the login form; the right token sets an HttpOnly, SameSite=Strict
// session cookie that the console's same-origin fetches carry; a wrong
// token, a login posted from another site, a tampered cookie and an
// expired session are refused.
func TestConsoleLogin(t *testing.T) {
	clk := fakeclock.New()
	_, base := adminServer(t, demoWithAdmin("", "admin:\n  token: "+testAdminToken+"\n"), nil, Options{Now: clk.Now})
	html := http.Header{"Accept": {"text/html,application/xhtml+xml"}}
	r := adminDo(t, nil, "GET", base+"/", "", html, nil)
	if r.status != 401 || !strings.Contains(r.body, `<form method="post" action="/admin/login">`) ||
		!strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") || !strings.Contains(r.header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("GET / from a browser without a session: %d %v %s", r.status, r.header, r.body)
	}
	if r := adminDo(t, nil, "GET", base+"/", "", nil, nil); r.status != 401 || refusalWord(t, r) != "unauthorized" {
		t.Errorf("GET / from a script: %d %s", r.status, r.body)
	}

	login := url.Values{"token": {testAdminToken}}
	if r := adminDo(t, nil, "POST", base+"/admin/login", "", nil, url.Values{"token": {"wrong"}}); r.status != 401 ||
		!strings.Contains(r.body, "not the admin token") || r.header.Get("Set-Cookie") != "" {
		t.Errorf("wrong token: %d %s", r.status, r.body)
	}
	for _, hdr := range []http.Header{{"Sec-Fetch-Site": {"cross-site"}}, {"Origin": {"http://attacker.example"}}} {
		if r := adminDo(t, nil, "POST", base+"/admin/login", "", hdr, login); r.status != 403 || r.header.Get("Set-Cookie") != "" {
			t.Errorf("login from another site (%v): %d %s", hdr, r.status, r.body)
		}
	}

	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar}
	r = adminDo(t, browser, "POST", base+"/admin/login", "", http.Header{"Sec-Fetch-Site": {"same-origin"}}, login)
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(base, "http://"))
	cookie := r.header.Get("Set-Cookie")
	if r.status != 303 || r.header.Get("Location") != "/" || !strings.HasPrefix(cookie, "fairgate_admin_"+port+"=") ||
		!strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Strict") || strings.Contains(cookie, testAdminToken) {
		t.Fatalf("login: %d Location %q Set-Cookie %q", r.status, r.header.Get("Location"), cookie)
	}
	for _, path := range []string{"/", "/console/console.js", "/admin/console", "/admin/tenants"} {
		if r := adminDo(t, browser, "GET", base+path, "", html, nil); r.status != 200 {
			t.Errorf("GET %s with the session: %d %s", path, r.status, r.body)
		}
	}

	u, _ := url.Parse(base)
	c := jar.Cookies(u)[0]
	tj, _ := cookiejar.New(nil)
	tampered := &http.Client{Jar: tj}
	tampered.Jar.SetCookies(u, []*http.Cookie{{Name: c.Name, Value: strings.Replace(c.Value, ".", "9.", 1)}})
	if r := adminDo(t, tampered, "GET", base+"/admin/tenants", "", nil, nil); r.status != 401 {
		t.Errorf("a tampered session (later expiry): %d", r.status)
	}
	clk.Advance(consoleSession)
	if r := adminDo(t, browser, "GET", base+"/admin/tenants", "", nil, nil); r.status != 401 {
		t.Errorf("a session after %v: %d, want 401", consoleSession, r.status)
	}
}

// TestAdminListenerMatchesConfig: Serve refuses an admin listener beyond
// loopback when admin_listen says loopback and no token is set.
func TestAdminListenerMatchesConfig(t *testing.T) {
	srv, _ := adminServer(t, demoWithAdmin("", ""), nil, Options{})
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Skip(err)
	}
	defer ln.Close()
	pub, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := srv.Serve(ctx, pub, ln, Shutdown{}); err == nil || !strings.Contains(err.Error(), "admin_listen \"127.0.0.1:9090\" is loopback") {
		t.Errorf("Serve on %s: %v", ln.Addr(), err)
	}
}

// TestRLSAdminAccess: `fairgate rls` puts the same check in front of its
// admin handler.
func TestRLSAdminAccess(t *testing.T) {
	dir := t.TempDir()
	writeAtomically(t, filepath.Join(dir, "d.yaml"), rlsRule("1"))
	r := newRLSOnly(t, ParseRLS, []byte("rls:\n  configs: ["+dir+"]\nadmin:\n  token: "+testAdminToken+"\n"))
	adm := httptest.NewServer(r.AdminHandler())
	defer adm.Close()
	for _, tc := range []struct {
		path, host string
		hdr        http.Header
		want       int
	}{
		{"/metrics", "", nil, 401},
		{"/metrics", "", bearer(testAdminToken), 200},
		{"/healthz", "", nil, 200},
		{"/metrics", "attacker.example", bearer(testAdminToken), 421},
	} {
		if got := adminDo(t, nil, "GET", adm.URL+tc.path, tc.host, tc.hdr, nil).status; got != tc.want {
			t.Errorf("GET %s Host %q: %d, want %d", tc.path, tc.host, got, tc.want)
		}
	}
}
