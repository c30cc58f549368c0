package rls

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fairgate/fairgate/admission/ratelimit"
)

// gatedStore holds every Take until release is closed, and fails them
// with err when set.
type gatedStore struct {
	entered chan struct{}
	release chan struct{}
	err     error
}

func (s *gatedStore) Take(ctx context.Context, _ ratelimit.BucketKey, l ratelimit.Limit, cost float64) (ratelimit.Result, error) {
	if s.entered != nil {
		s.entered <- struct{}{}
		<-s.release
	}
	if s.err != nil {
		return ratelimit.Result{}, s.err
	}
	return ratelimit.Result{Allowed: true, Remaining: l.Burst - cost}, nil
}

// TestGracefulStop: a call in flight when the server is told to stop
// finishes with its answer; Serve returns after it, and later calls fail.
func TestGracefulStop(t *testing.T) {
	store := &gatedStore{entered: make(chan struct{}, 1), release: make(chan struct{})}
	cfg := Config{Drain: 10 * time.Second}.withDefaults()
	svc, err := NewService(cfg, mustLoad(t, "testdata/edge.yaml"), Options{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(cfg, svc, nil)
	if _, ok := srv.grpc.GetServiceInfo()["grpc.reflection.v1.ServerReflection"]; ok {
		t.Error("reflection registered by default")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	answered := make(chan error, 1)
	go func() {
		resp, err := client.ShouldRateLimit(context.Background(), request("edge", 0, desc("remote_address", "1.2.3.4")))
		if err == nil && resp.OverallCode != ok {
			err = errors.New(resp.OverallCode.String())
		}
		answered <- err
	}()
	<-store.entered // the call is in flight
	cancel()
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) with a call in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(store.release)
	if err := <-answered; err != nil {
		t.Fatalf("in-flight call: %v", err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	cctx, ccancel := context.WithTimeout(context.Background(), time.Second)
	defer ccancel()
	if _, err := client.ShouldRateLimit(cctx, request("edge", 0, desc("remote_address", "1.2.3.4"))); err == nil {
		t.Fatal("a call after the stop was answered")
	}
}

// TestStoreErrorIsUnavailable: a store that cannot decide (the Redis
// store under fail_closed) makes the call Unavailable, so Envoy's
// failure_mode_deny decides; never OK by accident.
func TestStoreErrorIsUnavailable(t *testing.T) {
	h := start(t, Config{}, mustLoad(t, "testdata/edge.yaml"), Options{Store: &gatedStore{err: errors.New("redis down")}})
	_, err := h.client.ShouldRateLimit(context.Background(), request("edge", 0, desc("remote_address", "1.2.3.4")))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v, want Unavailable", err)
	}
	// A descriptor without a limit needs no store.
	if resp := h.call(t, request("edge", 0, desc("path", "/other"))); resp.OverallCode != ok {
		t.Fatalf("unlimited descriptor: %v", resp.OverallCode)
	}
}
