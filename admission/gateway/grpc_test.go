package gateway

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/fairgate/fairgate/admission"
)

// TestGRPCEndToEnd: a real grpc-go client through the gateway to a real
// gRPC server (the health and reflection services) over h2c: unary,
// server-streaming
// and bidirectional-streaming calls pass, trailers included; an over-quota call fails with
// RESOURCE_EXHAUSTED, its retry delay in grpc-retry-pushback-ms and the
// RateLimit fields; a missing key is UNAUTHENTICATED.
func TestGRPCEndToEnd(t *testing.T) {
	for _, engine := range engines {
		t.Run(string(engine), func(t *testing.T) { testGRPC(t, engine) })
	}
}

func testGRPC(t *testing.T, engine Engine) {
	hs := health.NewServer()
	uln := grpcUpstream(t, hs)

	base, _, _ := startGateway(t, func(c *Config) {
		c.Server.Engine = engine
		c.Upstream = "http://" + uln.Addr().String()
		c.UpstreamProtocol = UpstreamH2C
	}, Options{})
	cc, err := grpc.NewClient(strings.TrimPrefix(base, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := healthpb.NewHealthClient(cc)
	withKey := func(key string) (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key), cancel
	}

	ctx, cancel := withKey("demo-enterprise-key")
	defer cancel()
	var hdr, trl metadata.MD
	resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr), grpc.Trailer(&trl))
	if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("unary Check: %v, %v", resp, err)
	}
	if len(hdr.Get("ratelimit")) == 0 {
		t.Errorf("unary answer lacks RateLimit: %v", hdr)
	}

	// Server streaming: each status change arrives as it happens.
	hs.SetServingStatus("svc", healthpb.HealthCheckResponse_SERVING)
	sctx, scancel := withKey("demo-enterprise-key")
	defer scancel()
	stream, err := client.Watch(sctx, &healthpb.HealthCheckRequest{Service: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := stream.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first Watch message: %v, %v", m, err)
	}
	hs.SetServingStatus("svc", healthpb.HealthCheckResponse_NOT_SERVING)
	if m, err := stream.Recv(); err != nil || m.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("second Watch message: %v, %v", m, err)
	}
	scancel()

	// Bidirectional streaming: each request is answered while the stream
	// stays open (a request stream read whole before the call would never
	// end).
	bctx, bcancel := withKey("demo-enterprise-key")
	defer bcancel()
	bidi, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(bctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := bidi.Send(&reflectionpb.ServerReflectionRequest{
			MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatalf("bidi send %d: %v", i, err)
		}
		m, err := bidi.Recv()
		if err != nil {
			t.Fatalf("bidi answer %d: %v", i, err)
		}
		if len(m.GetListServicesResponse().GetService()) < 2 {
			t.Fatalf("bidi answer %d lists %v", i, m.GetListServicesResponse().GetService())
		}
	}
	bidi.CloseSend()
	bcancel()

	// A gRPC error status of the upstream's (in its trailers) reaches the
	// client as it is.
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "unknown"}); status.Code(err) != codes.NotFound {
		t.Fatalf("Check of an unknown service: %v, want the upstream's NOT_FOUND", err)
	}

	nctx, ncancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ncancel()
	if _, err := client.Check(nctx, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no key: %v, want UNAUTHENTICATED", err)
	}

	qctx, qcancel := withKey("demo-starter-key")
	defer qcancel()
	for i := range 200 {
		trl = nil
		// A trailers-only answer's fields are the call's trailers.
		_, err := client.Check(qctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&trl))
		if err == nil {
			continue
		}
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("call %d: %v, want RESOURCE_EXHAUSTED", i, err)
		}
		if !strings.Contains(status.Convert(err).Message(), "Retry after") {
			t.Errorf("message %q lacks the retry delay", status.Convert(err).Message())
		}
		if p := trl.Get("grpc-retry-pushback-ms"); len(p) == 0 || p[0] == "0" {
			t.Errorf("grpc-retry-pushback-ms %v", p)
		}
		if len(trl.Get("ratelimit")) == 0 || len(trl.Get("retry-after")) == 0 {
			t.Errorf("rejection lacks RateLimit or Retry-After: %v", trl)
		}
		return
	}
	t.Fatal("200 calls of the starter tenant were never refused")
}

// TestGRPCChargeOnStatus: a gRPC call's outcome is its grpc-status under
// HTTP 200, so a charge_on_status route charges a failed call by it
// (NOT_FOUND counts as 404), on every engine; a call that succeeds is
// refunded.
func TestGRPCChargeOnStatus(t *testing.T) {
	for _, engine := range engines {
		t.Run(string(engine), func(t *testing.T) {
			uln := grpcUpstream(t, health.NewServer())
			base, _, _ := startGateway(t, func(c *Config) {
				c.Server.Engine = engine
				c.Upstream = "http://" + uln.Addr().String()
				c.UpstreamProtocol = UpstreamH2C
				c.Admission.Routes = append([]admission.RouteConfig{{Method: "POST", Path: "/grpc.health.v1.Health/Check",
					Cost: 5, ChargeOnStatus: []admission.StatusRange{{Lo: 400, Hi: 499}}}}, c.Admission.Routes...)
				tc := c.Tenants.Tiers["starter"]
				tc.Rate, tc.Burst = 0.001, 100
				c.Tenants.Tiers["starter"] = tc
			}, Options{})
			cc, err := grpc.NewClient(strings.TrimPrefix(base, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer demo-starter-key")
			client := healthpb.NewHealthClient(cc)
			for range 3 {
				if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "no-such-service"}); status.Code(err) != codes.NotFound {
					t.Fatalf("Check of an unknown service: %v, want NotFound", err)
				}
			}
			if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
				t.Fatal(err)
			}
			var hdr metadata.MD
			if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&hdr)); err != nil {
				t.Fatal(err)
			}
			// 100 less the reserve of this call (5) and 3 failures × 5.
			if got := hdr.Get("ratelimit-remaining"); len(got) != 1 || got[0] != "80" {
				t.Fatalf("RateLimit-Remaining after 3 NOT_FOUND calls of cost 5 and one OK: %v, want 80", got)
			}
		})
	}
}

// grpcUpstream serves hs, and reflection, on a loopback listener, stopped
// when t ends.
func grpcUpstream(t *testing.T, hs healthpb.HealthServer) net.Listener {
	t.Helper()
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	reflection.Register(gs) // its ServerReflectionInfo is a bidirectional stream
	uln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(uln)
	t.Cleanup(gs.Stop)
	return uln
}
