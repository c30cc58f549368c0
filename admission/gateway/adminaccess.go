package gateway

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

const (
	// defaultAdminListen is admin_listen's default: loopback, so that
	// the admin listener needs no token out of the box.
	defaultAdminListen = "127.0.0.1:9090"
	// minAdminToken is the shortest admin token accepted: long enough
	// that guessing it over the network is hopeless.
	minAdminToken = 16
	// consoleSession is how long a console login lasts.
	consoleSession = 12 * time.Hour
	// adminLoginPath is the console's login form: GET shows it, POST
	// takes the token and sets the session cookie.
	adminLoginPath = "/admin/login"
)

// validateAdmin checks the admin section against admin_listen, reading the
// token file. Errors name the field.
func (c *Config) validateAdmin() []error {
	var errs []error
	if u := c.Admin.JaegerUIURL; u != "" {
		if p, err := url.Parse(u); err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			errs = append(errs, fmt.Errorf("admin.jaeger_ui_url: %q is not an http(s) URL with a host", u))
		}
	}
	listen := c.AdminListen
	if listen == "" {
		listen = defaultAdminListen // Parse validates before it fills defaults
	}
	if _, err := newAdminPolicy(c.Admin, listen); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// adminPolicy is what adminAccess enforces: the token and the allowed
// hosts of one config. It is immutable; a reload swaps it whole.
type adminPolicy struct {
	// hasToken is whether a token is required; tokenSum is its SHA-256,
	// compared with the SHA-256 of what a request presents, so that
	// neither the comparison's time nor the token's length leaks.
	hasToken bool
	tokenSum [32]byte
	// allowed are admin.allowed_hosts, normalized (canonHost).
	allowed map[string]bool
}

// newAdminPolicy checks a and builds its policy for an admin listener
// bound to listen, reading admin.token_file. Errors name the field.
func newAdminPolicy(a AdminConfig, listen string) (*adminPolicy, error) {
	var errs []error
	p := &adminPolicy{allowed: make(map[string]bool, len(a.AllowedHosts))}
	token := a.Token
	switch {
	case a.Token != "" && a.TokenFile != "":
		errs = append(errs, errors.New("admin.token, admin.token_file: set one, not both"))
	case a.TokenFile != "":
		b, err := os.ReadFile(a.TokenFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("admin.token_file: %w", err))
			break
		}
		if token = strings.TrimSpace(string(b)); token == "" {
			errs = append(errs, fmt.Errorf("admin.token_file: %s is empty", a.TokenFile))
		} else if err := checkAdminToken(token); err != nil {
			errs = append(errs, fmt.Errorf("admin.token_file: the token in %s %w", a.TokenFile, err))
		}
	case a.Token != "":
		if err := checkAdminToken(token); err != nil {
			errs = append(errs, fmt.Errorf("admin.token: %w", err))
		}
	}
	p.hasToken, p.tokenSum = token != "", sha256.Sum256([]byte(token))
	loopback := loopbackListen(listen)
	if !loopback && a.Token == "" && a.TokenFile == "" {
		errs = append(errs, fmt.Errorf("admin.token: required, since admin_listen %q is not a loopback address: "+
			"set admin.token or admin.token_file (openssl rand -hex 32 makes one), or bind 127.0.0.1", listen))
	}
	if len(a.AllowedHosts) > 0 && !loopback {
		errs = append(errs, fmt.Errorf("admin.allowed_hosts: only for a loopback admin_listen; on %q admin.token guards the listener and every Host is answered", listen))
	}
	for i, h := range a.AllowedHosts {
		n := canonHost(h)
		if _, err := netip.ParseAddr(n); err != nil && !hostName(n) || hostOf(h) != h {
			errs = append(errs, fmt.Errorf("admin.allowed_hosts[%d]: %q is not a host name or address (no scheme, port or wildcard)", i, h))
		}
		p.allowed[n] = true
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// checkAdminToken says what is wrong with a token, if anything.
func checkAdminToken(t string) error {
	if len(t) < minAdminToken {
		return fmt.Errorf("must be at least %d characters, not %d (openssl rand -hex 32 makes one)", minAdminToken, len(t))
	}
	for i := 0; i < len(t); i++ {
		if t[i] < 0x21 || t[i] > 0x7e {
			return errors.New("must be printable ASCII without spaces: it is sent in an Authorization header")
		}
	}
	return nil
}

// hostName reports whether h is a plain DNS name: letters, digits, '-',
// '_' and inner dots.
func hostName(h string) bool {
	if h == "" || h[0] == '.' || h[0] == '-' {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// loopbackListen reports whether an admin listener bound to addr is
// reachable only from this host: a loopback IP (127.0.0.0/8, ::1) or the
// name localhost. An empty host (":9090"), an unspecified address
// (0.0.0.0, [::]) and any other name are not: a name other than localhost
// may resolve anywhere.
func loopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false // the listener will not start either
	}
	return strings.EqualFold(host, "localhost") || loopbackIP(host)
}

// loopbackIP reports whether h is a loopback IP address: 127.0.0.0/8
// (also IPv4-mapped) or ::1.
func loopbackIP(h string) bool {
	a, err := netip.ParseAddr(h)
	return err == nil && a.Unmap().IsLoopback()
}

// canonHost is a Host header's host (or an allowed host) in the form
// hosts are compared in: without a port or an IPv6 literal's brackets, in
// lower case, without a trailing dot, an IP address in its canonical text
// ([::0:1]:9090 is ::1).
func canonHost(hostport string) string {
	h := strings.TrimSuffix(strings.TrimPrefix(hostOf(hostport), "["), "]")
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if a, err := netip.ParseAddr(h); err == nil {
		return a.String()
	}
	return h
}

// hostAllowed reports whether a loopback admin listener answers a request
// for Host hostport: localhost, a loopback address or an allowed host.
// Subdomains of localhost are not loopback names here: not every resolver
// keeps them off the network (RFC 6761 asks, it cannot make them), so
// they are allowed only when listed.
func (p *adminPolicy) hostAllowed(hostport string) bool {
	h := canonHost(hostport)
	return h == "localhost" || p.allowed[h] || loopbackIP(h)
}

// tokenMatches reports, in constant time, whether t is the token.
func (p *adminPolicy) tokenMatches(t string) bool {
	sum := sha256.Sum256([]byte(t))
	return p.hasToken && subtle.ConstantTimeCompare(sum[:], p.tokenSum[:]) == 1
}

// session is the console's cookie value for a login that ends at exp: exp
// and an HMAC of it keyed by the token's hash. The browser never holds the
// token itself, and a new token ends every session.
func (p *adminPolicy) session(exp time.Time) string {
	e := strconv.FormatInt(exp.Unix(), 10)
	return e + "." + hex.EncodeToString(p.sessionMAC(e))
}

func (p *adminPolicy) sessionMAC(exp string) []byte {
	m := hmac.New(sha256.New, p.tokenSum[:])
	m.Write([]byte("fairgate admin console session\x00" + exp))
	return m.Sum(nil)
}

// sessionValid reports whether v is a session of this token not expired
// at now.
func (p *adminPolicy) sessionValid(v string, now time.Time) bool {
	e, mac, ok := strings.Cut(v, ".")
	exp, err := strconv.ParseInt(e, 10, 64)
	got, herr := hex.DecodeString(mac)
	if !ok || err != nil || herr != nil || now.Unix() >= exp {
		return false
	}
	return hmac.Equal(got, p.sessionMAC(e))
}

// adminAccess is the admin listener's handler: it checks the Host and the
// token, then hands the request to next (the admin mux). Both `fairgate
// serve` (Server) and `fairgate rls` (RLSOnly) put it in front of their
// whole admin handler.
//
// /healthz and /readyz need no token: they say "ok" or "ready" and
// nothing else, and kubelet probes cannot take a header from a Secret
// (httpHeaders are literal in the pod spec). They are not exempt from the
// Host check: what can reach a loopback listener runs on this host and
// asks for localhost or 127.0.0.1.
type adminAccess struct {
	next http.Handler
	now  func() time.Time
	// listen is admin_listen when the listener was built, and loopback
	// whether it is a loopback address: the bind in force until a
	// restart, whatever a reloaded config says.
	listen   string
	loopback bool
	policy   atomic.Pointer[adminPolicy]
	// csrf refuses a cross-origin POST of the login form.
	csrf http.CrossOriginProtection
}

var _ http.Handler = (*adminAccess)(nil)

// newAdminAccess puts p, checked for listen by newAdminPolicy, in front of
// next.
func newAdminAccess(listen string, p *adminPolicy, next http.Handler, now func() time.Time) *adminAccess {
	h := &adminAccess{next: next, now: now, listen: listen, loopback: loopbackListen(listen)}
	h.policy.Store(p)
	return h
}

// policyFor checks cfg's admin section against the listener in force, not
// cfg's admin_listen (a change to it needs a restart), and builds its
// policy for a reload to store.
func (h *adminAccess) policyFor(cfg Config) (*adminPolicy, error) {
	p, err := newAdminPolicy(cfg.Admin, h.listen)
	if err != nil && cfg.AdminListen != h.listen {
		err = fmt.Errorf("%w\n(checked against the admin listener in use on %s: admin_listen changes need a restart)", err, h.listen)
	}
	return p, err
}

// checkListener refuses an admin listener that is not loopback when
// admin_listen says loopback: without a token it would serve the network.
func (h *adminAccess) checkListener(addr net.Addr) error {
	if a, ok := addr.(*net.TCPAddr); ok && h.loopback && !a.IP.IsLoopback() && !h.policy.Load().hasToken {
		return fmt.Errorf("gateway: the admin listener is on %s, but admin_listen %q is loopback and no admin.token is set", addr, h.listen)
	}
	return nil
}

func (h *adminAccess) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := h.policy.Load()
	if h.loopback && !p.hostAllowed(r.Host) {
		writeAdminRefusal(w, http.StatusMisdirectedRequest, "misdirected_request",
			fmt.Sprintf("this admin listener answers only Host localhost, a loopback address or one of admin.allowed_hosts, not %q", r.Host))
		return
	}
	if !p.hasToken || r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
		h.next.ServeHTTP(w, r)
		return
	}
	if r.URL.Path == adminLoginPath {
		h.login(w, r, p)
		return
	}
	auth := r.Header.Get("Authorization")
	if auth != "" {
		scheme, cred, _ := strings.Cut(auth, " ")
		if strings.EqualFold(scheme, "Bearer") && p.tokenMatches(strings.TrimSpace(cred)) {
			h.next.ServeHTTP(w, r)
			return
		}
	} else if c, err := r.Cookie(sessionCookie(r.Host)); err == nil && p.sessionValid(c.Value, h.now()) {
		h.next.ServeHTTP(w, r)
		return
	}
	// RFC 6750: a token was presented and is wrong, or none was.
	challenge := `Bearer realm="fairgate admin"`
	if auth != "" {
		challenge += `, error="invalid_token"`
	}
	w.Header().Set("WWW-Authenticate", challenge)
	if r.Method == http.MethodGet && r.URL.Path == "/" && strings.Contains(r.Header.Get("Accept"), "text/html") {
		writeLoginPage(w, http.StatusUnauthorized, "")
		return
	}
	msg := "the admin listener needs admin.token: send Authorization: Bearer <token>, or log in to the console at " + adminLoginPath
	if auth != "" {
		msg = "that is not the admin token (admin.token)"
	}
	writeAdminRefusal(w, http.StatusUnauthorized, "unauthorized", msg)
}

// login is the console's login: GET shows the form, POST takes the token
// and sets a session cookie (HttpOnly, so the page's script never sees it;
// SameSite=Strict, so no other site's page sends it) and goes to the
// console. The console's fetches are same-origin and carry the cookie.
func (h *adminAccess) login(w http.ResponseWriter, r *http.Request, p *adminPolicy) {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		writeLoginPage(w, http.StatusOK, "")
		return
	case http.MethodPost:
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		writeAdminRefusal(w, http.StatusMethodNotAllowed, "method_not_allowed", "GET shows the login form; POST sends it")
		return
	}
	if err := h.csrf.Check(r); err != nil {
		writeAdminRefusal(w, http.StatusForbidden, "forbidden", "a login from another site's page is refused")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if !p.tokenMatches(strings.TrimSpace(r.PostFormValue("token"))) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="fairgate admin", error="invalid_token"`)
		writeLoginPage(w, http.StatusUnauthorized, "That is not the admin token.")
		return
	}
	// Max-Age, not Expires: the browser's clock need not agree with ours.
	http.SetCookie(w, &http.Cookie{Name: sessionCookie(r.Host), Value: p.session(h.now().Add(consoleSession)), Path: "/",
		MaxAge: int(consoleSession / time.Second), HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// sessionCookie is the session cookie's name for the admin listener at
// Host hostport. Cookies are kept per host, not per port, so each port has
// its own name: two instances on one host (9090, 9092) keep their logins
// apart.
func sessionCookie(hostport string) string {
	if _, port, err := net.SplitHostPort(hostport); err == nil && port != "" {
		return "fairgate_admin_" + port
	}
	return "fairgate_admin"
}

// adminRefusal is the JSON body of the access check's answers: the kind
// of answer and an explanation for a person, as in the client contract's
// admission.Rejection.
type adminRefusal struct {
	Error   string `json:"error"`
	Message string `json:"message"`
}

func writeAdminRefusal(w http.ResponseWriter, status int, word, msg string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(adminRefusal{word, msg})
}

// writeLoginPage writes the console's login form, with note (plain text)
// above it. The page runs no script and loads nothing.
func writeLoginPage(w http.ResponseWriter, status int, note string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'")
	w.WriteHeader(status)
	if note != "" {
		note = `<p class="note">` + html.EscapeString(note) + `</p>`
	}
	fmt.Fprintf(w, loginPage, note, adminLoginPath)
}

const loginPage = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>fairgate console: log in</title>
<link rel="icon" href="data:,">
<style>body { font: 15px/1.4 system-ui, sans-serif; max-width: 24em; margin: 5em auto; padding: 0 1em; }
input { display: block; width: 100%%; box-sizing: border-box; margin: .4em 0 1em; padding: .4em; font: inherit; }
.note { color: #b00020; }</style>
</head>
<body>
<h1>fairgate console</h1>
%s
<form method="post" action="%s">
<label>Admin token (<code>admin.token</code>)
<input type="password" name="token" autocomplete="current-password" required autofocus></label>
<button type="submit">Log in</button>
</form>
</body>
</html>
`
