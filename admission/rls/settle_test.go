package rls

import (
	"strings"
	"testing"

	commonrl "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// tokensRules: 100 tokens an hour per user, so what settlements charged
// shows in limit_remaining.
var tokensRules = Source{"t.yaml", []byte("domain: llm\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 100}\n")}

// reserveCall is the request path's call: user's reserve, enforced.
func reserveCall(user string, reserve uint64) *rlsv3.RateLimitRequest {
	d := desc("user", user)
	d.HitsAddend = wrapperspb.UInt64(reserve)
	return request("llm", 0, d)
}

// settleCall is Envoy's call once the stream is done: what user used
// (hits_addend from the response), marked as a settlement of reserve.
func settleCall(user string, used uint64, reserve string) *rlsv3.RateLimitRequest {
	d := desc("user", user, SettleKey, reserve)
	d.HitsAddend = wrapperspb.UInt64(used)
	return request("llm", 0, d)
}

// TestSettleOnStreamDone: Envoy's apply_on_stream_done call, marked with
// SettleKey, settles what the request used against the reserve taken on
// the request path, on the same bucket: a charge beyond what is left is
// taken (into debt, at most the burst) rather than refused, and a usage
// below the reserve is refunded.
func TestSettleOnStreamDone(t *testing.T) {
	testSettleOnStreamDone(t, func(t *testing.T) *harness { return start(t, Config{}, mustRules(t, tokensRules), Options{}) })
}

func testSettleOnStreamDone(t *testing.T, newHarness func(*testing.T) *harness) {
	h := newHarness(t)
	remaining := func(user string) uint32 {
		t.Helper()
		resp := h.call(t, request("llm", 0, func() *commonrl.RateLimitDescriptor {
			d := desc("user", user)
			d.HitsAddend = wrapperspb.UInt64(0) // a check: reads the bucket, charges nothing
			return d
		}()))
		if resp.OverallCode != ok {
			return 0
		}
		return resp.Statuses[0].LimitRemaining
	}
	if resp := h.call(t, reserveCall("ann", 20)); resp.OverallCode != ok || resp.Statuses[0].LimitRemaining != 80 {
		t.Fatalf("reserve of 20: %v", resp)
	}
	resp := h.call(t, settleCall("ann", 5, "20"))
	if resp.OverallCode != ok || resp.Statuses[0].Code != ok || resp.Statuses[0].CurrentLimit != nil {
		t.Fatalf("a settlement is answered a bare OK: %v", resp)
	}
	if got := remaining("ann"); got != 95 {
		t.Fatalf("used 5 of a reserve of 20: %d left, want 95", got)
	}
	// 95 left; a request reserving 20 uses 300: 95 − 20 − 280, held at
	// the floor of one burst of debt (−100).
	h.call(t, reserveCall("ann", 20))
	if resp := h.call(t, settleCall("ann", 300, "20")); resp.OverallCode != ok {
		t.Fatalf("a settlement over what is left: %v, want OK (never refused)", resp)
	}
	if resp := h.call(t, reserveCall("ann", 1)); resp.OverallCode != over {
		t.Fatalf("in debt: %v, want OVER_LIMIT", resp)
	} else if d := resp.Statuses[0].DurationUntilReset.AsDuration(); d.Minutes() < 60 || d.Minutes() > 61 {
		// 101 tokens at 100 an hour: the debt's 100 and the one asked.
		t.Fatalf("in debt: duration_until_reset %v, want about 61 minutes", d)
	}
	// Another user's bucket is untouched; a settlement of what was
	// reserved changes nothing.
	h.call(t, reserveCall("bo", 10))
	h.call(t, settleCall("bo", 10, "10"))
	if got := remaining("bo"); got != 90 {
		t.Fatalf("bo: %d left, want 90", got)
	}
}

// TestSettleMarkerInvalid: a SettleKey entry that is not the last, or
// whose value is no reserve, is InvalidArgument naming the field.
func TestSettleMarkerInvalid(t *testing.T) {
	h := start(t, Config{}, mustRules(t, tokensRules), Options{})
	for _, d := range []*commonrl.RateLimitDescriptor{
		desc("user", "ann", SettleKey, "-1"),
		desc("user", "ann", SettleKey, "2e9"),
		desc("user", "ann", SettleKey, "lots"),
		desc(SettleKey, "20", "user", "ann"),
	} {
		_, err := h.client.ShouldRateLimit(t.Context(), request("llm", 0, d))
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "descriptors[0].entries: a "+SettleKey) {
			t.Errorf("%v: %v, want InvalidArgument naming descriptors[0].entries", d, err)
		}
	}
}
