package admission

import (
	"encoding/json"
	"testing"
)

// TestAppendRejectionIsJSON: the appended body is byte for byte what
// encoding/json marshals, for the strings a config or a client can put in
// it (quotes, controls, HTML, invalid UTF-8, U+2028).
func TestAppendRejectionIsJSON(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uote\back`, "ctl\x00\x01\b\f\n\r\t\x1f\x7f", "<a href='x'>&amp;</a>",
		"bad\xff\xfeutf8\xc3", "line\u2028para\u2029end", "tenant ünïcødé 日本 🙂"} {
		r := Rejection{Error: s, Message: s + " Retry after 3s.", Layer: "rate", Reason: s, RetryAfter: 3, RequestID: s}
		want, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(appendRejection(nil, &r)); got != string(want)+"\n" {
			t.Errorf("%q:\n got %s\nwant %s", s, got, want)
		}
	}
}

// FuzzAppendJSONString checks the appender against encoding/json.
func FuzzAppendJSONString(f *testing.F) {
	f.Add("x<y>&\"\\\u2028\xff")
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); string(got) != string(want) {
			t.Errorf("%q: got %s, want %s", s, got, want)
		}
	})
}

// BenchmarkAppendRejection: a 429's JSON body, the message a rate
// rejection's.
func BenchmarkAppendRejection(b *testing.B) {
	r := Rejection{Error: "rate_limited", Layer: "rate", Reason: "tenant_quota", RetryAfter: 3, RequestID: "38b098529c57a1d9",
		Message: "Tenant flood is over its flood rate quota (GET /api/v1/users/me costs 1 tokens). Retry after 3s."}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = appendRejection(buf[:0], &r)
	}
}
