package rls

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// TestConfiguredBounds: rls.max_descriptors, max_entries and
// max_request_bytes move the bounds both ways, and the message names the
// configured one.
func TestConfiguredBounds(t *testing.T) {
	wide := start(t, Config{Limits: Limits{MaxDescriptors: 100, MaxEntries: 40, MaxRequestBytes: 256 << 10}}, compatRules(t), Options{})
	var long []string
	for i := range 33 {
		long = append(long, "k"+strconv.Itoa(i), "v")
	}
	for name, req := range map[string]*rlsv3.RateLimitRequest{
		"65 descriptors": request("c", 0, descriptors(65)...),
		"33 entries":     request("c", 0, desc(long...)),
		"65 KiB":         request("c", 0, desc("user", strings.Repeat("x", 65<<10))),
	} {
		if _, err := wide.client.ShouldRateLimit(context.Background(), req); err != nil {
			t.Errorf("%s under wider bounds: %v", name, err)
		}
	}
	narrow := start(t, Config{Limits: Limits{MaxDescriptors: 2, MaxEntries: 1}}, compatRules(t), Options{})
	for _, tc := range []struct {
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{request("c", 0, descriptors(3)...), "rls: descriptors: 3 in one request, more than rls.max_descriptors (2)"},
		{request("c", 0, desc("user", "u", "team", "t")), "rls: descriptors[0].entries: 2, more than rls.max_entries (1)"},
	} {
		_, err := narrow.client.ShouldRateLimit(context.Background(), tc.req)
		if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != tc.want {
			t.Errorf("got %v, want InvalidArgument %q", err, tc.want)
		}
	}
	cfg := Config{Configs: []string{"x"}, NearLimitRatio: 1.5, Limits: Limits{MaxDescriptors: -1, MaxEntries: -1, MaxRequestBytes: -1}}
	err := cfg.Validate()
	for _, want := range []string{"rls.max_descriptors: must be >= 0", "rls.max_entries: must be >= 0", "rls.max_request_bytes: must be >= 0", "rls.near_limit_ratio: 1.5 is not between 0 and 1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want %q", err, want)
		}
	}
}

// firstHeld holds the first Take until release is closed and passes the
// others at once.
type firstHeld struct {
	taken   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (s *firstHeld) Take(_ context.Context, _ ratelimit.BucketKey, l ratelimit.Limit, cost float64) (ratelimit.Result, error) {
	if !s.taken.Swap(true) {
		close(s.entered)
		<-s.release
	}
	return ratelimit.Result{Allowed: true, Remaining: l.Burst - cost}, nil
}

// TestMaxConcurrentStreams: with rls.max_concurrent_streams 1, a second
// call on the connection waits for the first to finish; the negative
// control, the default bound, answers it while the first is held.
func TestMaxConcurrentStreams(t *testing.T) {
	for _, tc := range []struct {
		streams uint32
		waits   bool
	}{{1, true}, {0, false}} {
		store := &firstHeld{entered: make(chan struct{}), release: make(chan struct{})}
		h := start(t, Config{Limits: Limits{MaxConcurrentStreams: tc.streams}}, compatRules(t), Options{Store: store})
		first := make(chan error, 1)
		go func() {
			_, err := h.client.ShouldRateLimit(context.Background(), request("c", 0, desc("user", "a")))
			first <- err
		}()
		<-store.entered
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err := h.client.ShouldRateLimit(ctx, request("c", 0, desc("user", "b")))
		cancel()
		if waited := status.Code(err) == codes.DeadlineExceeded; waited != tc.waits {
			t.Errorf("max_concurrent_streams %d: second call %v, want waiting %v", tc.streams, err, tc.waits)
		}
		close(store.release)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
	}
}

// TestNearLimitMetric: an admitted decision that leaves more than
// ⌊ratio × limit⌋ tokens used counts in fairgate_rls_near_limit_total
// (envoyproxy/ratelimit's near_limit, NEAR_LIMIT_RATIO 0.8 by default);
// refusals and checks do not.
func TestNearLimitMetric(t *testing.T) {
	rules := mustRules(t, Source{"n.yaml", []byte("domain: n\ndescriptors:\n  - {key: user, rate_limit: {unit: minute, requests_per_unit: 10}}\n")})
	for _, tc := range []struct {
		ratio float64
		want  float64
	}{{0, 2}, {0.5, 5}, {1, 0}} {
		reg := prometheus.NewRegistry()
		tel, err := NewTelemetry(TelemetryOptions{Metrics: reg})
		if err != nil {
			t.Fatal(err)
		}
		h := start(t, Config{NearLimitRatio: tc.ratio}, rules, Options{Telemetry: tel})
		for range 12 { // ten admitted, two refused
			h.call(t, request("n", 0, desc("user", "u")))
		}
		h.call(t, request("n", 0, check("user", "u")))
		if got := counterValue(t, reg, "fairgate_rls_near_limit_total", map[string]string{"domain": "n", "descriptor": "user"}); got != tc.want {
			t.Errorf("ratio %v: near_limit %v, want %v", tc.ratio, got, tc.want)
		}
	}
}

// counterValue is the sum of the counters name{labels} in reg: 0 when
// there are none.
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		n := 0.0
	metrics:
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue metrics
				}
			}
			n += m.GetCounter().GetValue()
		}
		return n
	}
	return 0
}
