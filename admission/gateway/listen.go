package gateway

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/fairgate/fairgate/internal/proxyproto"
)

// protocols returns the public server's protocols for c: HTTP/1.1 always;
// HTTP/2 over TLS (ALPN "h2") when server.tls is set, and over cleartext
// with prior knowledge when server.h2c is on. Both HTTP/2 forms are
// net/http's own server; the request path is the same handler as
// HTTP/1.1's.
func protocols(c ServerConfig) *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(c.TLS != nil)
	p.SetUnencryptedHTTP2(c.H2C == nil || *c.H2C)
	return p
}

// wrapListener returns ln as the public listener sees it: behind the PROXY
// protocol when server.proxy_protocol is on (the header read within
// read_header_timeout, and taken only from trusted proxies when there are
// any), and over TLS when server.tls is set.
func wrapListener(ln net.Listener, c ServerConfig, tc *tls.Config, trusted trustedProxies) net.Listener {
	if c.ProxyProtocol {
		pl := &proxyproto.Listener{Listener: ln, HeaderTimeout: c.ReadHeaderTimeout}
		if len(trusted) > 0 {
			pl.Allow = func(peer net.Addr) bool {
				ap, err := netip.ParseAddrPort(peer.String())
				return err == nil && trusted.trusts(ap.Addr())
			}
		}
		ln = pl
	}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	return ln
}

// tlsConfig is the public listener's TLS config for c, nil without
// server.tls. It fails when the certificate cannot be loaded now; later
// changes to the files are loaded as they come (certReloader).
func tlsConfig(c ServerConfig, log *slog.Logger) (*tls.Config, error) {
	if c.TLS == nil {
		return nil, nil
	}
	r := &certReloader{cert: c.TLS.CertFile, key: c.TLS.KeyFile, log: log, now: time.Now}
	if err := r.load(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2", "http/1.1"},
		GetCertificate: r.get,
	}, nil
}

// certReloader serves a certificate from its files and loads them again
// when either changes (checked at most once a second, on a handshake), so
// a renewed certificate is served without a restart and without dropping a
// connection. A change that does not load (a half-written file, a key
// that does not match) is logged and the old certificate stays.
type certReloader struct {
	cert, key string
	log       *slog.Logger
	now       func() time.Time

	mu sync.Mutex
	// current is the certificate served; stamp says which files' it is;
	// checked is when they were last looked at.
	current *tls.Certificate
	stamp   [2]fileStamp
	checked time.Time
}

// fileStamp is what says a file changed: its modification time and size.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{fi.ModTime(), fi.Size()}, nil
}

// load reads both files now.
func (r *certReloader) load() error {
	var st [2]fileStamp
	var err error
	for i, p := range []string{r.cert, r.key} {
		if st[i], err = stampOf(p); err != nil {
			return fmt.Errorf("server.tls: %w", err)
		}
	}
	cert, err := tls.LoadX509KeyPair(r.cert, r.key)
	if err != nil {
		return fmt.Errorf("server.tls: %w", err)
	}
	r.mu.Lock()
	r.current, r.stamp, r.checked = &cert, st, r.now()
	r.mu.Unlock()
	return nil
}

// get is tls.Config.GetCertificate.
func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	now := r.now()
	if now.Sub(r.checked) < time.Second {
		c := r.current
		r.mu.Unlock()
		return c, nil
	}
	r.checked = now
	old := r.stamp
	r.mu.Unlock()
	changed := false
	for i, p := range []string{r.cert, r.key} {
		if st, err := stampOf(p); err == nil && st != old[i] {
			changed = true
		}
	}
	if changed {
		if err := r.load(); err != nil {
			r.log.Warn("TLS certificate changed but did not load; serving the old one", "err", err)
		} else {
			r.log.Info("TLS certificate reloaded", "cert_file", r.cert)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.current, nil
}
