package rls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
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
// now (errors name the field), or nil for nil t.
func serverCredentials(t *TLSConfig, log *slog.Logger) (credentials.TransportCredentials, error) {
	if t == nil {
		return nil, nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &tlsFiles{files: [3]string{t.CertFile, t.KeyFile, t.ClientCAFile}, log: log, now: time.Now}
	if err := f.load(); err != nil {
		return nil, err
	}
	return credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: f.forClient}), nil
}

// tlsFiles serves the TLS config made of its files, and makes it again
// when one of them changes. Safe for concurrent use.
type tlsFiles struct {
	files [3]string // cert_file, key_file, client_ca_file ("" when none)
	log   *slog.Logger
	now   func() time.Time

	mu      sync.Mutex
	current *tls.Config  // guarded by mu: what handshakes get
	stamps  [3]fileStamp // guarded by mu: the files current was made of
	checked time.Time    // guarded by mu: when the files were last looked at
}

// tlsFields name the files in errors.
var tlsFields = [3]string{"rls.tls.cert_file", "rls.tls.key_file", "rls.tls.client_ca_file"}

// fileStamp is what says a file changed: its modification time and size.
type fileStamp struct {
	mod  time.Time
	size int64
}

// load reads the files and makes the TLS config of them.
func (f *tlsFiles) load() error {
	var data [3][]byte
	var st [3]fileStamp
	for i, p := range f.files {
		if p == "" {
			continue
		}
		fi, err := os.Stat(p)
		if err == nil {
			data[i], err = os.ReadFile(p)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", tlsFields[i], err)
		}
		st[i] = fileStamp{fi.ModTime(), fi.Size()}
	}
	cert, err := tls.X509KeyPair(data[0], data[1])
	if err != nil {
		return fmt.Errorf("rls.tls: cert_file %s and key_file %s: %w", f.files[0], f.files[1], err)
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	if f.files[2] != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(data[2]) {
			return fmt.Errorf("%s: %s holds no PEM certificate", tlsFields[2], f.files[2])
		}
		c.ClientCAs, c.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	f.mu.Lock()
	f.current, f.stamps, f.checked = c, st, f.now()
	f.mu.Unlock()
	return nil
}

// forClient is tls.Config.GetConfigForClient: the current config, made
// again first when a file changed since it was made.
func (f *tlsFiles) forClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	f.mu.Lock()
	now := f.now()
	if now.Sub(f.checked) < time.Second {
		c := f.current
		f.mu.Unlock()
		return c, nil
	}
	f.checked = now
	old := f.stamps
	f.mu.Unlock()
	changed := false
	for i, p := range f.files {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil && (fileStamp{fi.ModTime(), fi.Size()}) != old[i] {
			changed = true
		}
	}
	if changed {
		if err := f.load(); err != nil {
			f.log.Warn("rls: TLS files changed but did not load; serving the old ones", "err", err.Error())
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.current, nil
}
