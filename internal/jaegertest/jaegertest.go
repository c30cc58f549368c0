// Package jaegertest starts a real Jaeger v2 (built by .ci/jaeger/build.sh)
// for a test, on free loopback ports with in-memory storage, and queries
// its HTTP API.
//
// The binary is $FAIRGATE_JAEGER, else ~/.cache/fairgate/jaeger-v1.76.0/jaeger
// when it exists. Without one the test is skipped, unless
// FAIRGATE_REQUIRE_JAEGER=1; a FAIRGATE_JAEGER that is set but does not
// start is a failure (make test sets it, so it must work).
package jaegertest

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// configTemplate is ../shared/jaeger/jaeger-loopback.yaml with its ports
// replaced by placeholders the test fills with free ones.
//
//go:embed jaeger.yaml.tmpl
var configTemplate string

// Jaeger is a running Jaeger.
type Jaeger struct {
	// OTLPHTTP and OTLPGRPC are the OTLP receivers' base URLs
	// ("http://127.0.0.1:PORT"), for tracing.endpoint.
	OTLPHTTP, OTLPGRPC string
	// Query is the query service's base URL (API under /api).
	Query string
}

// Binary returns the Jaeger binary's path, skipping or failing t as the
// package doc says when there is none.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("FAIRGATE_JAEGER"); p != "" {
		if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			t.Fatalf("FAIRGATE_JAEGER=%s is not an executable file (%v); run .ci/jaeger/build.sh", p, err)
		}
		return p
	}
	if home, err := os.UserHomeDir(); err == nil {
		p := filepath.Join(home, ".cache", "fairgate", "jaeger-v1.76.0", "jaeger")
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p
		}
	}
	if os.Getenv("FAIRGATE_REQUIRE_JAEGER") == "1" {
		t.Fatal("FAIRGATE_REQUIRE_JAEGER=1 but no Jaeger binary: run .ci/jaeger/build.sh and set FAIRGATE_JAEGER")
	}
	t.Skip("no Jaeger binary (set FAIRGATE_JAEGER; .ci/jaeger/build.sh builds one)")
	return ""
}

// Start starts Jaeger and waits until its health check answers. Cleanup
// kills it by PID and removes its config.
func Start(t testing.TB) *Jaeger {
	t.Helper()
	bin := Binary(t)
	ports := freePorts(t, 5)
	names := []string{"OTLP_GRPC", "OTLP_HTTP", "QUERY_HTTP", "QUERY_GRPC", "HEALTH"}
	cfg := configTemplate
	for i, n := range names {
		cfg = strings.ReplaceAll(cfg, "${"+n+"}", fmt.Sprint(ports[i]))
	}
	path := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	cmd := exec.Command(bin, "--config=file:"+path)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("jaeger output:\n%s", out.String())
		}
	})
	j := &Jaeger{
		OTLPGRPC: fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		OTLPHTTP: fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
		Query:    fmt.Sprintf("http://127.0.0.1:%d", ports[2]),
	}
	health := fmt.Sprintf("http://127.0.0.1:%d/status", ports[4])
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case err := <-exited:
			exited <- err
			t.Fatalf("jaeger exited before it was ready: %v\n%s", err, out.String())
		default:
		}
		if resp, err := http.Get(health); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return j
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger not healthy after 15s:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond) // polling a starting process, bounded
	}
}

// Span is a span as the v1 query API returns it, with its tags flattened.
type Span struct {
	TraceID   string
	SpanID    string
	Name      string
	ParentID  string // empty for the root
	Tags      map[string]any
	Service   string
	Duration  time.Duration
	StartTime time.Time
}

// Trace returns the spans of the trace with the given ID (32 hex digits),
// or nil when Jaeger does not have it (yet).
func (j *Jaeger) Trace(id string) ([]Span, error) {
	resp, err := http.Get(j.Query + "/api/traces/" + url.PathEscape(id))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("jaegertest: GET trace %s: %s", id, resp.Status)
	}
	var body struct {
		Data []struct {
			TraceID string `json:"traceID"`
			Spans   []struct {
				TraceID       string `json:"traceID"`
				SpanID        string `json:"spanID"`
				OperationName string `json:"operationName"`
				References    []struct {
					RefType string `json:"refType"`
					TraceID string `json:"traceID"`
					SpanID  string `json:"spanID"`
				} `json:"references"`
				StartTime int64 `json:"startTime"` // µs
				Duration  int64 `json:"duration"`  // µs
				Tags      []struct {
					Key   string `json:"key"`
					Value any    `json:"value"`
				} `json:"tags"`
				ProcessID string `json:"processID"`
			} `json:"spans"`
			Processes map[string]struct {
				ServiceName string `json:"serviceName"`
			} `json:"processes"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("jaegertest: decode trace %s: %w", id, err)
	}
	var spans []Span
	for _, tr := range body.Data {
		for _, s := range tr.Spans {
			sp := Span{TraceID: s.TraceID, SpanID: s.SpanID, Name: s.OperationName, Tags: map[string]any{},
				Service: tr.Processes[s.ProcessID].ServiceName, Duration: time.Duration(s.Duration) * time.Microsecond,
				StartTime: time.UnixMicro(s.StartTime)}
			for _, r := range s.References {
				if r.RefType == "CHILD_OF" && r.TraceID == s.TraceID {
					sp.ParentID = r.SpanID
				}
			}
			for _, tg := range s.Tags {
				sp.Tags[tg.Key] = tg.Value
			}
			spans = append(spans, sp)
		}
	}
	return spans, nil
}

// WaitTrace polls until Jaeger has the trace with at least minSpans spans,
// or fails t after timeout.
func (j *Jaeger) WaitTrace(t testing.TB, id string, minSpans int, timeout time.Duration) []Span {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		spans, err := j.Trace(id)
		if err != nil {
			t.Fatal(err)
		}
		if len(spans) >= minSpans {
			return spans
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s: %d spans in Jaeger after %v, want >= %d", id, len(spans), timeout, minSpans)
		}
		time.Sleep(20 * time.Millisecond) // polling an external process, bounded
	}
}

func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 1<<20 {
		return len(p), nil
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
