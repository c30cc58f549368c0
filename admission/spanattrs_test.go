package admission

import (
	"context"
	"math"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fairgate/fairgate/bulkhead"
	"github.com/fairgate/fairgate/shed"
)

// TestSpanAttributesTrue (issue 12): a bulkhead wait_timeout span reported
// queue.wait_ms 0 after waiting a second (the Seat it asked was the zero
// one), and floats were unrounded (ratelimit.remaining 499.03333333333336).
func TestSpanAttributesTrue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := tracetest.NewSpanRecorder()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
		cfg := testConfig()
		cfg.Bulkhead = &bulkhead.Config{Total: 2, Pools: map[string]bulkhead.PoolConfig{
			"enterprise": {Share: 1, QueueLength: 1, MaxWait: time.Second},
			"starter":    {Share: 1, QueueLength: 1, MaxWait: time.Second},
		}}
		cfg.Shedding = &shed.SheddingConfig{Disabled: true}
		g, err := New(cfg, testRegistry(t), Options{TracerProvider: tp})
		if err != nil {
			t.Fatal(err)
		}
		tr := tp.Tracer("test")
		ctx, root := tr.Start(context.Background(), SpanRequest)
		defer root.End()

		held, err := g.Check(ctx, req("ent-key", "GET", "/api/v1/users/me"))
		if err != nil || !held.Allowed {
			t.Fatalf("first: %+v %v", held, err)
		}
		time.Sleep(time.Millisecond / 3) // a third of a token back
		d, err := g.Check(ctx, req("ent-key", "GET", "/api/v1/users/me"))
		if err != nil || d.Reason != ReasonWaitTimeout {
			t.Fatalf("second: %v %v, want wait_timeout", d.Reason, err)
		}
		held.Lease().Release()

		var bulkheadWait []float64
		for _, s := range rec.Ended() {
			for _, kv := range s.Attributes() {
				if kv.Value.Type() == attribute.FLOAT64 {
					if x := kv.Value.AsFloat64(); x*1000 != math.Round(x*1000) {
						t.Errorf("%s %s = %v: not rounded to 3 decimals", s.Name(), kv.Key, x)
					}
				}
				if s.Name() == SpanBulkhead && kv.Key == attrQueueWait {
					bulkheadWait = append(bulkheadWait, kv.Value.AsFloat64())
				}
			}
		}
		if len(bulkheadWait) != 2 || bulkheadWait[1] != 1000 {
			t.Errorf("queue.wait_ms = %v, want [0 1000] (the second waited max_wait)", bulkheadWait)
		}
	})
}
