package gateway

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// validateEdge checks the protocol and proxy fields of the server section.
func (s ServerConfig) validateEdge() []error {
	var errs []error
	if t := s.TLS; t != nil {
		if t.CertFile == "" {
			errs = append(errs, errors.New("server.tls.cert_file: required (a PEM certificate chain)"))
		}
		if t.KeyFile == "" {
			errs = append(errs, errors.New("server.tls.key_file: required (the certificate's PEM private key)"))
		}
	}
	if _, err := parseTrustedProxies(s.TrustedProxies); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// parseTrustedProxies parses server.trusted_proxies: CIDRs, or single
// addresses (a /32 or /128).
func parseTrustedProxies(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	var errs []error
	for i, v := range list {
		v = strings.TrimSpace(v)
		if p, err := netip.ParsePrefix(v); err == nil {
			if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 { // ::ffff:10.0.0.0/104 is 10.0.0.0/8
				p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
			}
			out = append(out, p.Masked())
			continue
		}
		if a, err := netip.ParseAddr(v); err == nil {
			out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			continue
		}
		errs = append(errs, fmt.Errorf("server.trusted_proxies[%d]: %q is not a CIDR (10.0.0.0/8) or an IP address", i, v))
	}
	return out, errors.Join(errs...)
}
