// Package selfsigned writes a self-signed TLS certificate for the loopback
// address, for the servers the benchmarks and tests run over TLS.
package selfsigned

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Write writes a new self-signed certificate (ECDSA P-256, for 127.0.0.1
// and localhost, valid from an hour ago for a day) with the given serial
// number, and its key, to dir's cert.pem and key.pem. Each file is written
// beside and renamed into place, as certificate managers do, so a reader
// never sees half of one. It returns the paths and the certificate.
func Write(dir string, serial int64) (certFile, keyFile string, cert *x509.Certificate, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "fairgate self-signed"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", nil, err
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for _, f := range []struct {
		path, kind string
		der        []byte
	}{{certFile, "CERTIFICATE", der}, {keyFile, "EC PRIVATE KEY", kder}} {
		tmp := f.path + ".tmp"
		if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: f.kind, Bytes: f.der}), 0o600); err != nil {
			return "", "", nil, err
		}
		if err := os.Rename(tmp, f.path); err != nil {
			return "", "", nil, err
		}
	}
	cert, err = x509.ParseCertificate(der)
	return certFile, keyFile, cert, err
}
