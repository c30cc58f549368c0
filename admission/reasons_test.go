package admission

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestReasonTable: every reason has a complete row, the words are unique,
// and 429 (you sent too much) and 503 (we are overloaded) are never mixed.
func TestReasonTable(t *testing.T) {
	seen := map[string]Reason{}
	for r := ReasonNone + 1; int(r) < len(reasons); r++ {
		row := r.row()
		if row.word == "" || row.layer == LayerNone || row.status == 0 || row.errWord == "" {
			t.Errorf("reason %d: incomplete row %+v", r, *row)
		}
		if o, dup := seen[row.word]; dup {
			t.Errorf("reasons %d and %d share the word %q", o, r, row.word)
		}
		seen[row.word] = r
		switch row.status {
		case http.StatusTooManyRequests:
			if row.errWord != errRateLimited {
				t.Errorf("%v: 429 with error %q", r, row.errWord)
			}
		case http.StatusServiceUnavailable:
			if row.errWord != errOverloaded {
				t.Errorf("%v: 503 with error %q", r, row.errWord)
			}
		}
	}
}

// TestWriteReason: an answer outside the pipeline renders from the table,
// with Retry-After exactly for 429 and 503.
func TestWriteReason(t *testing.T) {
	for _, tc := range []struct {
		r     Reason
		retry bool
	}{{ReasonBodyTooLarge, false}, {ReasonMalformedBody, false}, {ReasonUpstreamTimeout, false},
		{ReasonUpstreamUnreachable, false}, {ReasonHandlerPanic, false}, {ReasonLimitReached, true}} {
		rec := httptest.NewRecorder()
		WriteReason(rec, tc.r, 1500*time.Millisecond, "rid", "unexpected EOF")
		var body Rejection
		if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
			t.Fatalf("%v: %v", tc.r, err)
		}
		want := Rejection{Error: tc.r.row().errWord, Layer: tc.r.Layer().String(), Reason: tc.r.String(), RequestID: "rid"}
		if tc.retry {
			want.RetryAfter = 2
		}
		got := body
		got.Message = ""
		if got != want || rec.Code != tc.r.Status() || body.Message == "" {
			t.Errorf("%v: %d %+v, want %d %+v with a message", tc.r, rec.Code, body, tc.r.Status(), want)
		}
		if h := rec.Header().Get("Retry-After"); (h != "") != tc.retry {
			t.Errorf("%v: Retry-After %q", tc.r, h)
		}
	}
}
