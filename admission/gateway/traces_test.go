package gateway

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/codes"

	"github.com/fairgate/fairgate/admission"
)

func TestTraceRingKeepsRejectedTracesFairly(t *testing.T) {
	ring := NewTraceRing(10)
	tp := NewConsoleTracerProvider(ring)
	defer tp.Shutdown(context.Background())
	tr := tp.Tracer("test")
	record := func(tenant, reqID, decision string) {
		ctx, root := tr.Start(context.Background(), admission.SpanRequest)
		_, rate := tr.Start(ctx, admission.SpanRate)
		if decision == admission.OutcomeReject {
			rate.SetStatus(codes.Error, "rate: tenant_quota")
		}
		rate.End()
		root.SetAttributes(admission.AttrDecision.String(decision), admission.AttrTenantID.String(tenant),
			admission.AttrRequestID.String(reqID), admission.AttrRejectedBy.String("rate"))
		root.End()
	}
	record("acme", "acme-1", admission.OutcomeReject)
	record("acme", "acme-ok", admission.OutcomeAdmit)
	for i := range 50 {
		record("initech", fmt.Sprintf("initech-%d", i), admission.OutcomeReject)
	}
	if got := ring.Len(); got != 10 {
		t.Fatalf("Len = %d, want 10", got)
	}
	if _, ok := ring.Find("acme-ok"); ok {
		t.Error("an admitted trace was kept")
	}
	got, ok := ring.Find("acme-1")
	if !ok {
		t.Fatal("initech's flood of rejections pushed out acme's one trace")
	}
	if len(got.Spans) != 2 || !got.Spans[1].SaidNo || got.Spans[1].Name != admission.SpanRate || got.Spans[1].ParentID != got.Spans[0].SpanID {
		t.Errorf("spans = %+v, want the root and admission.rate (said no) under it", got.Spans)
	}
	if byTrace, ok := ring.Find(got.TraceID); !ok || byTrace != got {
		t.Errorf("Find(trace ID %s) = %v, %v", got.TraceID, byTrace, ok)
	}
	if _, ok := ring.Find("initech-49"); !ok {
		t.Error("initech's latest trace is not kept")
	}
	if _, ok := ring.Find("initech-0"); ok {
		t.Error("initech's oldest trace is still kept past the bound")
	}
}
