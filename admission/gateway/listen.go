package gateway

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/fairgate/fairgate/internal/proxyproto"
	"github.com/fairgate/fairgate/internal/tlsreload"
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
// changes to the files are loaded as they come (internal/tlsreload).
func tlsConfig(c ServerConfig, log *slog.Logger) (*tls.Config, error) {
	if c.TLS == nil {
		return nil, nil
	}
	certs, err := tlsreload.Load([]string{c.TLS.CertFile, c.TLS.KeyFile}, []string{"server.tls.cert_file", "server.tls.key_file"},
		"TLS certificate", func(data [][]byte) (*tls.Certificate, error) {
			cert, err := tls.X509KeyPair(data[0], data[1])
			if err != nil {
				return nil, fmt.Errorf("server.tls: %w", err)
			}
			return &cert, nil
		}, log, time.Now)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     []string{"h2", "http/1.1"},
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return certs.Get(), nil },
	}, nil
}
