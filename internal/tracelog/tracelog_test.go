package tracelog

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

func TestTraceIDsOnLinesWithASpan(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(New(slog.NewJSONHandler(&buf, nil))).With("component", "test")
	tp := sdktrace.NewTracerProvider()
	ctx, sp := tp.Tracer("t").Start(context.Background(), "op")
	log.InfoContext(ctx, "with span")
	sp.End()
	log.Info("without")
	lines := bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n"))
	if len(lines) != 2 {
		t.Fatalf("got %d lines", len(lines))
	}
	var with, without map[string]any
	json.Unmarshal(lines[0], &with)
	json.Unmarshal(lines[1], &without)
	if got, want := with["trace_id"], sp.SpanContext().TraceID().String(); got != want {
		t.Fatalf("trace_id %v, want %v", got, want)
	}
	if with["span_id"] != sp.SpanContext().SpanID().String() || with["component"] != "test" {
		t.Fatalf("line %s", lines[0])
	}
	if _, ok := without["trace_id"]; ok {
		t.Fatalf("line without a span has a trace_id: %s", lines[1])
	}
}
