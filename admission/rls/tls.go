package rls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/fairgate/fairgate/internal/tlsreload"
)

// TLSConfig is rls.tls: the gRPC server's certificate and, for mutual
// TLS, the CAs its clients' certificates must chain to. Paths are as
// given (relative ones to the working directory, as server.tls's). The
// files are read when the server is built, so a missing or bad one fails
// before anything listens, and again when one of them changes (looked at
// at most once a second, on a handshake): a renewed certificate or CA
// bundle is in force without a restart or a dropped connection, and one
// that does not load is logged while the old stays.
type TLSConfig struct {
	// CertFile and KeyFile are PEM files: the certificate chain and its
	// private key. Both required.
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ClientCAFile, when set, is a PEM file of CA certificates: every
	// client must then present a certificate that chains to one of them
	// (for client authentication), or the handshake fails, as
	// envoyproxy/ratelimit's GRPC_CLIENT_TLS_CACERT. Empty means clients
	// are not asked for a certificate.
	ClientCAFile string `yaml:"client_ca_file"`
}

// validate checks t (nil: no TLS); errors name the field under "rls.".
func (t *TLSConfig) validate() []error {
	if t == nil {
		return nil
	}
	var errs []error
	if t.CertFile == "" {
		errs = append(errs, errors.New("rls.tls.cert_file: required (a PEM certificate chain)"))
	}
	if t.KeyFile == "" {
		errs = append(errs, errors.New("rls.tls.key_file: required (the certificate's PEM private key)"))
	}
	return errs
}

// serverCredentials returns the gRPC server's TLS credentials of t, read
// now (errors name the field), or nil for nil t. Changed files are read
// again as they come (internal/tlsreload).
func serverCredentials(t *TLSConfig, log *slog.Logger) (credentials.TransportCredentials, error) {
	if t == nil {
		return nil, nil
	}
	files := []string{t.CertFile, t.KeyFile, t.ClientCAFile}
	cfg, err := tlsreload.Load(files, tlsFields[:], "rls: TLS files", func(data [][]byte) (*tls.Config, error) {
		cert, err := tls.X509KeyPair(data[0], data[1])
		if err != nil {
			return nil, fmt.Errorf("rls.tls: cert_file %s and key_file %s: %w", files[0], files[1], err)
		}
		c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
		if files[2] != "" {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(data[2]) {
				return nil, fmt.Errorf("%s: %s holds no PEM certificate", tlsFields[2], files[2])
			}
			c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
		}
		return c, nil
	}, log, time.Now)
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return cfg.Get(), nil }}), nil
}

// tlsFields name the files in errors.
var tlsFields = [3]string{"rls.tls.cert_file", "rls.tls.key_file", "rls.tls.client_ca_file"}
