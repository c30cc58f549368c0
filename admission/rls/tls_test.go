package rls

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fairgate/fairgate/internal/selfsigned"
)

// clientCert writes a self-signed client certificate (its own CA) and its
// key to dir, and returns the paths and the pair.
func clientCert(t *testing.T, dir string) (certFile, keyFile string, pair tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "envoy"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "client.pem"), filepath.Join(dir, "client-key.pem")
	certPEM, keyPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if pair, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, pair
}

// serveTLS builds a Server with New from cfg (rules: a file of dir) and
// serves it on a loopback port until the test ends; it returns the
// address.
func serveTLS(t *testing.T, dir string, tc *TLSConfig) string {
	t.Helper()
	rules := filepath.Join(dir, "rules.yaml")
	if err := writeFile(rules, "domain: t\ndescriptors:\n  - {key: user, rate_limit: {unit: minute, requests_per_unit: 5}}\n"); err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Configs: []string{rules}, TLS: tc}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// callOver calls addr once with creds and returns the error.
func callOver(t *testing.T, addr string, creds credentials.TransportCredentials) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, request("t", 0, desc("user", "u")))
	if err == nil && resp.OverallCode != ok {
		t.Fatalf("answer %v", resp)
	}
	return err
}

// TestTLS: with rls.tls the server speaks TLS only: a client that trusts
// its certificate is answered, a cleartext one is not. With
// client_ca_file every client must present a certificate of that CA: one
// without, or with another, is refused.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, cert, err := selfsigned.Write(dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	trusting := func(certs ...tls.Certificate) credentials.TransportCredentials {
		return credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: certs, MinVersion: tls.VersionTLS12})
	}

	addr := serveTLS(t, dir, &TLSConfig{CertFile: certFile, KeyFile: keyFile})
	if err := callOver(t, addr, trusting()); err != nil {
		t.Fatalf("TLS client: %v", err)
	}
	if err := callOver(t, addr, insecure.NewCredentials()); err == nil {
		t.Fatal("a cleartext client was answered by a TLS server")
	}

	caFile, _, pair := clientCert(t, dir)
	_, _, otherPair := clientCert(t, t.TempDir())
	addr = serveTLS(t, dir, &TLSConfig{CertFile: certFile, KeyFile: keyFile, ClientCAFile: caFile})
	if err := callOver(t, addr, trusting(pair)); err != nil {
		t.Fatalf("mTLS client with a certificate: %v", err)
	}
	// The error a refused client sees depends on when the server's alert
	// arrives (a handshake error, a broken pipe): any error will do, the
	// call with a certificate above being the control.
	for name, creds := range map[string]credentials.TransportCredentials{"no certificate": trusting(), "another CA's": trusting(otherPair)} {
		if err := callOver(t, addr, creds); err == nil {
			t.Errorf("mTLS: a client with %s was answered", name)
		} else {
			t.Logf("mTLS, %s: %v", name, err)
		}
	}
}

// TestTLSErrors: a missing field is a Validate error, a file that does
// not load fails New, before anything listens; each names the field.
func TestTLSErrors(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _, err := selfsigned.Write(dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(dir, "rules.yaml")
	if err := writeFile(rules, "domain: t\ndescriptors:\n  - {key: user, rate_limit: {unit: minute, requests_per_unit: 5}}\n"); err != nil {
		t.Fatal(err)
	}
	notPEM := filepath.Join(dir, "ca.txt")
	if err := writeFile(notPEM, "not a certificate\n"); err != nil {
		t.Fatal(err)
	}
	_, otherKey, _, err := selfsigned.Write(t.TempDir(), 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		tls  TLSConfig
		want []string
	}{
		{"no files", TLSConfig{}, []string{"rls.tls.cert_file: required", "rls.tls.key_file: required"}},
		{"missing cert", TLSConfig{CertFile: filepath.Join(dir, "nope.pem"), KeyFile: keyFile}, []string{"rls.tls.cert_file: ", "nope.pem"}},
		{"missing key", TLSConfig{CertFile: certFile, KeyFile: filepath.Join(dir, "nope.pem")}, []string{"rls.tls.key_file: "}},
		{"key of another cert", TLSConfig{CertFile: certFile, KeyFile: otherKey}, []string{"rls.tls: cert_file", "key_file"}},
		{"missing CA", TLSConfig{CertFile: certFile, KeyFile: keyFile, ClientCAFile: filepath.Join(dir, "nope.pem")}, []string{"rls.tls.client_ca_file: "}},
		{"CA not PEM", TLSConfig{CertFile: certFile, KeyFile: keyFile, ClientCAFile: notPEM}, []string{"rls.tls.client_ca_file: ", "no PEM certificate"}},
	} {
		_, err := New(Config{Configs: []string{rules}, TLS: &tc.tls}, Options{})
		for _, w := range tc.want {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v, want %q", tc.name, err, w)
			}
		}
	}
}
