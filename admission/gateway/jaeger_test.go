package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/admission"
	"github.com/fairgate/fairgate/internal/jaegertest"
)

// TestJaegerEndToEnd runs the demo config with tracing to a real Jaeger,
// once per OTLP protocol, drives the gateway into a rejection by each kind
// of layer — rate (429), concurrency (429), the global backstop (503, an
// overload), identify (401) — and asks Jaeger's API for each trace: the
// root names the layer that rejected, and an admitted request's trace has
// the proxy.upstream span. Over gRPC, sample_admitted is 0: the rejected
// traces arrive and the admitted one does not (tail sampling).
func TestJaegerEndToEnd(t *testing.T) {
	j := jaegertest.Start(t)
	for _, tc := range []struct {
		proto    Protocol
		endpoint string
		ratio    float64
	}{{ProtocolHTTP, j.OTLPHTTP, 1}, {ProtocolGRPC, j.OTLPGRPC, 0}} {
		t.Run(string(tc.proto), func(t *testing.T) {
			ring := NewTraceRing(0) // the console's copy of the rejected traces
			tp, err := NewTracerProvider(context.Background(), &TracingConfig{Endpoint: tc.endpoint, Protocol: tc.proto,
				SampleAdmitted: &tc.ratio, ServiceName: "fairgate-test-" + strings.ReplaceAll(string(tc.proto), "/", "-")}, noEnv, ring)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { tp.Shutdown(context.Background()) })

			base, up, _ := startGateway(t, func(c *Config) {
				// A backstop that the steps below exhaust on purpose
				// (every tenant is above its share of a rate this low):
				// 1 + 25 + 25 tokens before the overload step, the last
				// search leaving 29 (a default request must leave a
				// quarter of the burst), then an export (sheddable: must
				// leave half) cannot pass.
				c.Admission.Global = &admission.GlobalConfig{Burst: 80, Rate: 0.001}
			}, Options{TracerProvider: tp, Traces: ring})
			release := make(chan struct{})
			var releaseOnce sync.Once
			releaseAll := func() { releaseOnce.Do(func() { close(release) }) }
			t.Cleanup(releaseAll) // a failed step must not leave the upstream holding requests
			var held atomic.Int32
			up.handler = func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("X-Tenant-Id") == "globex" {
					held.Add(1)
					<-release
				}
				io.WriteString(w, "ok")
			}

			// Admitted.
			admitted := do(t, "GET", base+"/api/v1/users/me", "demo-enterprise-key", nil)
			if admitted.status != 200 {
				t.Fatalf("admitted request: %d %s", admitted.status, admitted.body)
			}
			admittedID := traceID(t, admitted)
			if got := up.last().Header.Get("Traceparent"); !strings.Contains(got, admittedID) {
				t.Fatalf("upstream traceparent %q does not carry the trace ID %s", got, admittedID)
			}

			// Rate: initech's bucket holds 25 tokens, a search costs 5.
			var rate response
			for range 10 {
				if rate = do(t, "GET", base+"/api/v1/search", "demo-starter-key", nil); rate.status != 200 {
					break
				}
			}
			if rate.status != 429 || decodeRejection(t, rate)["layer"] != "rate" {
				t.Fatalf("rate step: %d %s", rate.status, rate.body)
			}

			// Concurrency: globex (max_concurrent 4) holds four searches at
			// the upstream; the fifth is refused (a search is not
			// critical, so the critical reserve above the cap is not
			// its).
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() { do(t, "GET", base+"/api/v1/search", "demo-pro-key", nil) })
			}
			waitFor(t, func() bool { return held.Load() == 4 })
			conc := do(t, "GET", base+"/api/v1/search", "demo-pro-key", nil)
			releaseAll()
			wg.Wait()
			if conc.status != 429 || decodeRejection(t, conc)["layer"] != "concurrency" {
				t.Fatalf("concurrency step: %d %s", conc.status, conc.body)
			}

			// Overload: acme's exports drain the global backstop: 503.
			var over response
			for range 5 {
				if over = do(t, "POST", base+"/api/v1/reports/export", "demo-enterprise-key", nil); over.status != 200 {
					break
				}
			}
			if over.status != 503 {
				t.Fatalf("overload step: %d %s", over.status, over.body)
			}

			// Identify: an unknown key. Its value must appear in no span.
			unknown := do(t, "GET", base+"/api/v1/users/me", "not-a-real-key-7f3a", nil)
			if unknown.status != 401 {
				t.Fatalf("unknown key: %d", unknown.status)
			}

			if err := tp.ForceFlush(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, want := range []struct {
				name                  string
				r                     response
				layer, reason, status string
				spans                 []string
			}{
				{"rate", rate, "rate", "tenant_quota", "429", []string{"admission.identify", "admission.rate"}},
				{"concurrency", conc, "concurrency", "max_concurrent", "429", []string{"admission.rate", "admission.concurrency"}},
				{"overload", over, "rate", "global_backstop", "503", []string{"admission.rate"}},
				{"identify", unknown, "identify", "unknown_key", "401", []string{"admission.identify"}},
			} {
				spans := j.WaitTrace(t, traceID(t, want.r), 1+len(want.spans), 10*time.Second)
				root := rootSpan(t, spans)
				t.Logf("%s trace: spans %v; root tags %v", want.name, spanNames(spans), root.Tags)
				if root.Tags["admission.rejected_by"] != want.layer || root.Tags["admission.reason"] != want.reason ||
					root.Tags["admission.decision"] != "reject" || tagString(root.Tags["http.response.status_code"]) != want.status {
					t.Errorf("%s: root tags %v, want rejected_by %s, reason %s, status %s", want.name, root.Tags, want.layer, want.reason, want.status)
				}
				if root.Tags["error"] != true {
					t.Errorf("%s: root span is not marked as an error: %v", want.name, root.Tags)
				}
				assertChildren(t, want.name, spans, root, want.spans)
				// The console keeps the same trace, the layer that said
				// no marked.
				if kept, ok := ring.Find(traceID(t, want.r)); !ok {
					t.Errorf("%s: the console's ring does not hold the trace", want.name)
				} else {
					var names, saidNo []string
					for _, s := range kept.Spans {
						names = append(names, s.Name)
						if s.SaidNo {
							saidNo = append(saidNo, s.Name)
						}
					}
					slices.Sort(names)
					if jn := slices.Sorted(slices.Values(spanNames(spans))); !slices.Equal(names, jn) {
						t.Errorf("%s: console spans %v, Jaeger's %v", want.name, names, jn)
					}
					if !slices.Equal(saidNo, []string{"admission." + want.layer}) {
						t.Errorf("%s: console marks %v as the span that said no, want admission.%s", want.name, saidNo, want.layer)
					}
				}
				if hasSpan(spans, "proxy.upstream") {
					t.Errorf("%s: a rejected request has a proxy.upstream span", want.name)
				}
				for _, s := range spans {
					for k, v := range s.Tags {
						if strings.Contains(tagString(v), "not-a-real-key") || strings.Contains(tagString(v), "demo-") {
							t.Errorf("%s: span %s tag %s carries an API key: %v", want.name, s.Name, k, v)
						}
					}
				}
			}
			rateSpans, _ := j.Trace(traceID(t, rate))
			if s := findSpan(rateSpans, "admission.rate"); s == nil || s.Tags["ratelimit.remaining"] == nil {
				t.Errorf("admission.rate span lacks ratelimit.remaining: %+v", s)
			}

			if tc.ratio == 0 {
				// Everything went in one flush; the rejected traces are
				// there, so the admitted one would be too.
				if spans, _ := j.Trace(admittedID); len(spans) != 0 {
					t.Fatalf("sample_admitted 0 but the admitted trace was exported: %d spans", len(spans))
				}
				return
			}
			spans := j.WaitTrace(t, admittedID, 6, 10*time.Second)
			root := rootSpan(t, spans)
			t.Logf("admitted trace %s: spans %v; root tags %v", admittedID, spanNames(spans), root.Tags)
			if root.Tags["admission.decision"] != "admit" || root.Tags["tenant.id"] != "acme" || root.Tags["tenant.tier"] != "enterprise" ||
				root.Tags["route"] != "GET /api/v1/users/me" || tagString(root.Tags["http.response.status_code"]) != "200" {
				t.Errorf("admitted root tags: %v", root.Tags)
			}
			if root.Service != "fairgate-test-http-protobuf" {
				t.Errorf("service %q", root.Service)
			}
			assertChildren(t, "admitted", spans, root, []string{"admission.identify", "admission.rate",
				"admission.concurrency", "admission.shed", "admission.bulkhead", "proxy.upstream"})
			if b := findSpan(spans, "admission.bulkhead"); b == nil || b.Tags["queue.wait_ms"] == nil || b.Tags["bulkhead.pool"] != "enterprise" {
				t.Errorf("admission.bulkhead span tags: %+v", b)
			}
		})
	}
}

func noEnv(string) string { return "" }

func traceID(t *testing.T, r response) string {
	t.Helper()
	id := r.header.Get(HeaderTraceID)
	if len(id) != 32 {
		t.Fatalf("response has no trace ID (%s: %q)", HeaderTraceID, id)
	}
	return id
}

func rootSpan(t *testing.T, spans []jaegertest.Span) jaegertest.Span {
	t.Helper()
	for _, s := range spans {
		if s.ParentID == "" {
			if s.Name != "fairgate.request" {
				t.Fatalf("root span is %q, want fairgate.request", s.Name)
			}
			return s
		}
	}
	t.Fatalf("no root span among %d", len(spans))
	return jaegertest.Span{}
}

func assertChildren(t *testing.T, name string, spans []jaegertest.Span, root jaegertest.Span, want []string) {
	t.Helper()
	for _, w := range want {
		s := findSpan(spans, w)
		if s == nil {
			t.Errorf("%s: no %s span (have %v)", name, w, spanNames(spans))
			continue
		}
		if s.ParentID != root.SpanID {
			t.Errorf("%s: %s is not a child of the root", name, w)
		}
	}
}

func findSpan(spans []jaegertest.Span, name string) *jaegertest.Span {
	for i := range spans {
		if spans[i].Name == name {
			return &spans[i]
		}
	}
	return nil
}

func hasSpan(spans []jaegertest.Span, name string) bool { return findSpan(spans, name) != nil }

func spanNames(spans []jaegertest.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

// tagString renders a tag value (Jaeger gives numbers as float64, which
// fmt prints without a fraction when there is none).
func tagString(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}
