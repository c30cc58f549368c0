package demoapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCompletion: a completion streams its tokens as server-sent events
// and reports them in the usage trailer once it is done.
func TestCompletion(t *testing.T) {
	srv := httptest.NewServer(New(Config{Connections: 1, TokensPerSecond: 10000}))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/chat/completions?tokens=500", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%v, %v", resp.Header, err)
	}
	if n := strings.Count(string(body), "data: {"); n < 2 || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Errorf("body %q: want several chunks, then [DONE]", body)
	}
	if got := resp.Trailer.Get(UsageTrailer); got != "500" {
		t.Errorf("trailer %s = %q, want 500", UsageTrailer, got)
	}
}
