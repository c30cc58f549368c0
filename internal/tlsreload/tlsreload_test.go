package tlsreload

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fairgate/fairgate/internal/selfsigned"
)

// TestReload: a certificate renewed in place is handed out once the files
// are looked at again (at most once a second); one that does not load
// keeps the old; a file that cannot be read at the start fails, named by
// its field.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _, err := selfsigned.Write(dir, 1)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	builds := 0
	pair := func(data [][]byte) (*tls.Certificate, error) {
		c, err := tls.X509KeyPair(data[0], data[1])
		return &c, err
	}
	f, err := Load([]string{certFile, keyFile, ""}, []string{"cert_file", "key_file", "ca_file"}, "TLS certificate",
		func(data [][]byte) (*tls.Certificate, error) {
			if data[2] != nil {
				t.Error("a path \"\" read as a file")
			}
			builds++
			return pair(data)
		}, nil, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	serial := func() int64 {
		t.Helper()
		x, err := x509.ParseCertificate(f.Get().Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		return x.SerialNumber.Int64()
	}
	if _, _, _, err := selfsigned.Write(dir, 2); err != nil {
		t.Fatal(err)
	}
	if got := serial(); got != 1 {
		t.Fatalf("within a second of the load: serial %d, want the old 1", got)
	}
	now = now.Add(2 * time.Second)
	if got := serial(); got != 2 {
		t.Fatalf("after the renewal: serial %d, want 2", got)
	}
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("garbage, longer than the key was. ", 20)), 0o600); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Second)
	if got := serial(); got != 2 {
		t.Fatalf("after a bad write: serial %d, want the old 2", got)
	}
	tried := builds
	now = now.Add(2 * time.Second)
	if serial(); builds != tried {
		t.Fatal("the same bad files tried again a second later")
	}
	if _, _, _, err := selfsigned.Write(dir, 3); err != nil { // mended
		t.Fatal(err)
	}
	now = now.Add(2 * time.Second)
	if got := serial(); got != 3 {
		t.Fatalf("after the files were mended: serial %d, want 3", got)
	}
	if _, err := Load([]string{dir + "/nope.pem", keyFile}, []string{"cert_file", "key_file"}, "TLS certificate", pair, nil, time.Now); err == nil || !strings.HasPrefix(err.Error(), "cert_file: ") {
		t.Fatalf("a missing file: %v, want an error led by its field", err)
	}
}
