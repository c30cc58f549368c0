package selfsigned

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
)

// TestWrite: the files load as a key pair, and the certificate verifies
// for 127.0.0.1 against itself.
func TestWrite(t *testing.T) {
	certFile, keyFile, cert, err := Write(t.TempDir(), 7)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.LoadX509KeyPair(certFile, keyFile); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	if cert.SerialNumber.Int64() != 7 {
		t.Fatalf("serial %v", cert.SerialNumber)
	}
}
