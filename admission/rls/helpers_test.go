package rls

import (
	"context"
	"net"
	"os"
	"testing"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/fakeclock"
)

// harness is a Server on a loopback port and a generated client of it.
type harness struct {
	client rlsv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	srv    *Server
	clock  *fakeclock.Clock
}

// start serves rules under cfg on a loopback port until the test ends.
// A nil store means an embedded store on a fake clock (h.clock), which
// is the service's clock too unless o has one.
func start(t testing.TB, cfg Config, rules *Rules, o Options) *harness {
	t.Helper()
	h := &harness{}
	if o.Store == nil {
		h.clock = fakeclock.New()
		o.Store = ratelimit.NewMemoryStore(ratelimit.MemoryStoreOptions{Now: h.clock.Now})
		if o.Now == nil {
			o.Now = h.clock.Now
		}
	}
	cfg = cfg.withDefaults()
	svc, err := NewService(cfg, rules, o)
	if err != nil {
		t.Fatal(err)
	}
	h.srv = newServer(cfg, svc, o.Logger)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.srv.Serve(ctx, ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	h.conn = conn
	h.client = rlsv3.NewRateLimitServiceClient(conn)
	t.Cleanup(func() {
		conn.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return h
}

// mustRules parses files from testdata (or inline sources).
func mustRules(t testing.TB, srcs ...Source) *Rules {
	t.Helper()
	r, err := ParseRules(srcs...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustLoad(t testing.TB, paths ...string) *Rules {
	t.Helper()
	r, err := LoadRules(paths)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// desc builds a request descriptor from key, value pairs.
func desc(kv ...string) *commonrl.RateLimitDescriptor {
	d := &commonrl.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &commonrl.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func request(domain string, hits uint32, ds ...*commonrl.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: hits, Descriptors: ds}
}

// call asks h and fails the test on a transport error.
func (h *harness) call(t testing.TB, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := h.client.ShouldRateLimit(context.Background(), req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

// header returns the value of the response header k, or "".
func header(resp *rlsv3.RateLimitResponse, k string) string {
	for _, h := range resp.ResponseHeadersToAdd {
		if h.Key == k {
			return h.Value
		}
	}
	return ""
}

// checkHeaders fails t for each header of resp that is not as in want
// ("" means absent).
func checkHeaders(t *testing.T, resp *rlsv3.RateLimitResponse, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if got := header(resp, k); got != w {
			t.Errorf("%s: %q, want %q", k, got, w)
		}
	}
}

func writeFile(path, data string) error { return os.WriteFile(path, []byte(data), 0o644) }
