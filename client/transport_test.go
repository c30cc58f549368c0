package client_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/fairgate/fairgate/client"
)

// newClient returns a client on clk whose transport cfg configures, with
// a seeded jitter source unless cfg has one.
func newClient(t *testing.T, clk *virtualClock, cfg client.Config) (*http.Client, *client.Transport) {
	t.Helper()
	cfg.Clock = clk
	if cfg.Rand == nil {
		cfg.Rand = rand.NewPCG(1, 2)
	}
	tr, err := client.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}, tr
}

// get sends GET url with ctx and returns the status (0 on error) and the
// error.
func get(ctx context.Context, c *http.Client, url string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// rejected returns the *client.RejectedError in err, failing the test
// when there is none.
func rejected(t *testing.T, err error) *client.RejectedError {
	t.Helper()
	var rej *client.RejectedError
	if !errors.As(err, &rej) {
		t.Fatalf("err = %v, want a *client.RejectedError", err)
	}
	return rej
}

func TestRetryAfter429IsWaitedExactly(t *testing.T) {
	clk := newVirtualClock()
	up := &script{clock: clk, replies: []reply{rejection(429, 2, "rate", "tenant_quota", "r1"), {status: 200, body: "ok"}}}
	c, tr := newClient(t, clk, client.Config{})
	if status, err := get(context.Background(), c, serve(t, up)); status != 200 || err != nil {
		t.Fatalf("got %d, %v; want 200", status, err)
	}
	seen := up.arrivals()
	if len(seen) != 2 {
		t.Fatalf("%d attempts, want 2", len(seen))
	}
	if gap := seen[1].at.Sub(seen[0].at); gap != 2*time.Second {
		t.Fatalf("retry %v after the 429, want exactly its Retry-After 2s", gap)
	}
	if st := tr.Stats(); st.Requests != 1 || st.Attempts != 2 || st.Retries != 1 || st.Rejections != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestRetryAfterAboveMaxWaitIsNotWaited(t *testing.T) {
	clk := newVirtualClock()
	up := &script{clock: clk, replies: []reply{rejection(429, 120, "rate", "tenant_quota", "r1"), {status: 200}}}
	c, _ := newClient(t, clk, client.Config{MaxWait: 30 * time.Second})
	_, err := get(context.Background(), c, serve(t, up))
	rej := rejected(t, err)
	if !errors.Is(err, client.ErrWaitTooLong) || rej.RetryAfter != 120*time.Second || rej.Attempts != 1 {
		t.Fatalf("err %v; want ErrWaitTooLong after 1 attempt with RetryAfter 2m", err)
	}
	if s := clk.Sleeps(); len(s) != 0 || len(up.arrivals()) != 1 {
		t.Fatalf("slept %v and sent %d attempts; want neither a wait nor an early retry", s, len(up.arrivals()))
	}
}

func TestRetryAfterHTTPDate(t *testing.T) {
	clk := newVirtualClock()
	date := clk.Now().Add(3 * time.Second).UTC().Truncate(time.Second).Add(time.Second) // a whole second, 3-4 s ahead
	r := rejection(503, 0, "bulkhead", "queue_full", "r1")
	r.header["Retry-After"] = date.Format(http.TimeFormat)
	up := &script{clock: clk, replies: []reply{r, {status: 200}}}
	c, _ := newClient(t, clk, client.Config{})
	if status, err := get(context.Background(), c, serve(t, up)); status != 200 {
		t.Fatalf("got %d, %v", status, err)
	}
	seen := up.arrivals()
	if !seen[1].at.After(date) && !seen[1].at.Equal(date) {
		t.Fatalf("retried at %v, before the Retry-After date %v", seen[1].at, date)
	}
}

// TestBackoffJitterBounds checks every 503 wait against its window: never
// before Retry-After, within Retry-After + min(MaxBackoff, RA × 2ⁿ), and
// spread over that window across seeds (full jitter, not a constant).
func TestBackoffJitterBounds(t *testing.T) {
	for _, ra := range []int{0, 1} {
		up503 := rejection(503, ra, "adaptive", "limit", "r")
		const retries = 5
		base, maxBackoff := 100*time.Millisecond, 4*time.Second
		lo := make([]time.Duration, retries) // the smallest and largest wait seen, per retry
		hi := make([]time.Duration, retries)
		for seed := range uint64(100) {
			clk := newVirtualClock()
			up := &script{clock: clk, replies: []reply{up503}}
			c, _ := newClient(t, clk, client.Config{MaxAttempts: retries + 1, BackoffBase: base, MaxBackoff: maxBackoff,
				Rand: rand.NewPCG(seed, 7), Budget: client.BudgetConfig{Disabled: true}})
			_, err := get(context.Background(), c, serve(t, up))
			if !errors.Is(err, client.ErrAttemptsExhausted) {
				t.Fatalf("err %v, want ErrAttemptsExhausted", err)
			}
			sleeps := clk.Sleeps()
			if len(sleeps) != retries {
				t.Fatalf("waits %v, want %d", sleeps, retries)
			}
			raD := time.Duration(ra) * time.Second
			for n, d := range sleeps {
				window := min(max(raD, base)<<n, maxBackoff)
				if d < raD || d >= raD+window {
					t.Fatalf("Retry-After %v, retry %d waited %v: outside [%v, %v)", raD, n, d, raD, raD+window)
				}
				if seed == 0 || d < lo[n] {
					lo[n] = d
				}
				hi[n] = max(hi[n], d)
			}
		}
		for n := range retries {
			window := min(max(time.Duration(ra)*time.Second, base)<<n, maxBackoff)
			start := time.Duration(ra) * time.Second
			if lo[n] > start+window/10 || hi[n] < start+window*9/10 {
				t.Errorf("Retry-After %ds, retry %d: waits span [%v, %v], not the window [%v, %v)", ra, n, lo[n], hi[n], start, start+window)
			}
		}
	}
}

func TestJitterIsReproducibleFromTheSeed(t *testing.T) {
	run := func() []time.Duration {
		clk := newVirtualClock()
		up := &script{clock: clk, replies: []reply{rejection(503, 1, "shed", "priority", "r")}}
		c, _ := newClient(t, clk, client.Config{MaxAttempts: 4, Rand: rand.NewPCG(42, 42)})
		get(context.Background(), c, serve(t, up))
		return clk.Sleeps()
	}
	if a, b := run(), run(); !cmp.Equal(a, b) {
		t.Fatalf("one seed, two runs: %v and %v", a, b)
	}
}

func TestRetriesOnlyWhatIsSafe(t *testing.T) {
	type body int
	const (
		noBody body = iota
		replayable
		oneShot // a body http.NewRequest cannot rewind: no GetBody
	)
	tests := []struct {
		method string
		key    bool
		body   body
		want   int // attempts
	}{
		{"GET", false, noBody, 2},
		{"HEAD", false, noBody, 2},
		{"OPTIONS", false, noBody, 2},
		{"PUT", false, replayable, 2},
		{"DELETE", false, noBody, 2},
		{"TRACE", false, noBody, 2},
		{"POST", false, replayable, 1},
		{"PATCH", false, replayable, 1},
		{"POST", true, replayable, 2},
		{"POST", true, noBody, 2},
		{"POST", true, oneShot, 1},
		{"PUT", false, oneShot, 1},
	}
	for _, tt := range tests {
		name := tt.method + map[bool]string{true: "+key"}[tt.key] + []string{"", " body", " one-shot body"}[tt.body]
		t.Run(name, func(t *testing.T) {
			clk := newVirtualClock()
			up := &script{clock: clk, replies: []reply{rejection(503, 1, "bulkhead", "queue_full", "r"), {status: 201}}}
			c, _ := newClient(t, clk, client.Config{})
			var rd io.Reader
			switch tt.body {
			case replayable:
				rd = strings.NewReader("payload")
			case oneShot:
				rd = io.MultiReader(strings.NewReader("payload"))
			}
			req, _ := http.NewRequest(tt.method, serve(t, up), rd)
			if tt.key {
				req.Header.Set("Idempotency-Key", "k-1")
			}
			resp, err := c.Do(req)
			seen := up.arrivals()
			if len(seen) != tt.want {
				t.Fatalf("%d attempts, want %d", len(seen), tt.want)
			}
			if tt.want == 1 {
				if !errors.Is(err, client.ErrNotRetryable) {
					t.Fatalf("err %v, want ErrNotRetryable", err)
				}
				return
			}
			if err != nil || resp.StatusCode != 201 {
				t.Fatalf("got %v, %v; want the retry's 201", resp, err)
			}
			resp.Body.Close()
			for i, a := range seen {
				if want := map[bool]string{true: "payload"}[tt.body != noBody]; a.body != want || a.method != tt.method {
					t.Fatalf("attempt %d: %s with body %q, want %s %q", i, a.method, a.body, tt.method, want)
				}
			}
		})
	}
}

func TestBudgetExhaustsAndRecovers(t *testing.T) {
	clk := newVirtualClock()
	up := &script{clock: clk, replies: []reply{rejection(503, 1, "rate", "global_backstop", "r")}}
	c, tr := newClient(t, clk, client.Config{MaxAttempts: 2,
		Budget: client.BudgetConfig{Ratio: 0.1, MinPerSecond: -1, Window: time.Minute}})
	url := serve(t, up)
	send := func(n int) (retried, denied int) {
		for range n {
			_, err := get(context.Background(), c, url)
			switch {
			case errors.Is(err, client.ErrAttemptsExhausted):
				retried++
			case errors.Is(err, client.ErrBudgetExhausted):
				denied++
			default:
				t.Fatalf("err %v", err)
			}
		}
		return retried, denied
	}
	// 10 % of 50 requests: the 10th, 20th, … may retry; the rest fail at
	// once, without waiting.
	if r, d := send(50); r != 5 || d != 45 {
		t.Fatalf("50 requests: %d retried, %d refused; want 5 and 45", r, d)
	}
	if s := clk.Sleeps(); len(s) != 5 {
		t.Fatalf("%d waits, want one per retry (5)", len(s))
	}
	if st := tr.Stats(); st.Retries != 5 || st.BudgetDenied != 45 {
		t.Fatalf("stats %+v", st)
	}
	if r, _ := send(9); r != 0 {
		t.Fatalf("59 requests: %d more retries, want 0 (5.9 allowed, 5 spent)", r)
	}
	// Once the window has passed, the spent retries no longer count.
	clk.Advance(2 * time.Minute)
	if r, d := send(10); r != 1 || d != 9 {
		t.Fatalf("after the window: %d retried, %d refused; want 1 and 9", r, d)
	}
}

func TestDeadlineTooNearReturnsAtOnce(t *testing.T) {
	clk := newVirtualClock()
	up := &script{clock: clk, replies: []reply{rejection(429, 5, "rate", "tenant_quota", "c0cd52f16063a73c"), {status: 200}}}
	c, _ := newClient(t, clk, client.Config{})
	url := serve(t, up)
	ctx, cancel := context.WithDeadline(context.Background(), clk.Now().Add(2*time.Second))
	defer cancel()

	_, err := get(ctx, c, url)
	rej := rejected(t, err)
	if !errors.Is(err, client.ErrDeadline) || rej.Status != 429 || rej.Reason != "tenant_quota" || rej.Layer != "rate" ||
		rej.RequestID != "c0cd52f16063a73c" || rej.RetryAfter != 5*time.Second {
		t.Fatalf("err %#v; want the server's 429 with ErrDeadline", rej)
	}
	if s := clk.Sleeps(); len(s) != 0 {
		t.Fatalf("waited %v before giving up", s)
	}

	// The 429 holds the credential's next requests too: one that cannot
	// wait 5 s is refused before it is sent.
	_, err = get(ctx, c, url)
	if !errors.Is(err, client.ErrDeadline) || len(up.arrivals()) != 1 {
		t.Fatalf("second request: err %v, %d sent; want ErrDeadline and nothing sent", err, len(up.arrivals()))
	}
	// One that can wait is sent when the Retry-After has passed.
	if status, err := get(context.Background(), c, url); status != 200 {
		t.Fatalf("third request: %d, %v", status, err)
	}
	if seen := up.arrivals(); seen[1].at.Sub(seen[0].at) != 5*time.Second {
		t.Fatalf("third request sent %v after the 429, want 5s", seen[1].at.Sub(seen[0].at))
	}
}

func TestRejectedErrorDecoding(t *testing.T) {
	tests := []struct {
		name string
		rep  reply
		want client.RejectedError
	}{
		{"fairgate body", rejection(429, 1, "rate", "tenant_quota", "c0cd"),
			client.RejectedError{Status: 429, Code: "rate_limited", Message: "Try later.", Layer: "rate", Reason: "tenant_quota", RetryAfter: time.Second, RequestID: "c0cd"}},
		{"retry_after from the body alone", reply{503, nil, `{"error":"overloaded","retry_after":3,"request_id":"b"}`},
			client.RejectedError{Status: 503, Code: "overloaded", RetryAfter: 3 * time.Second, RequestID: "b"}},
		{"truncated JSON", reply{503, map[string]string{"Retry-After": "2", "X-Request-Id": "hdr"}, `{"error":"overloaded","mess`},
			client.RejectedError{Status: 503, Message: `{"error":"overloaded","mess`, RetryAfter: 2 * time.Second, RequestID: "hdr"}},
		{"HTML", reply{503, nil, "<html>\r\n<body>Service Unavailable</body></html>"},
			client.RejectedError{Status: 503, Message: "<html>"}},
		{"empty", reply{429, map[string]string{"Retry-After": "7"}, ""},
			client.RejectedError{Status: 429, RetryAfter: 7 * time.Second}},
		{"wrong types keep what decodes", reply{503, nil, `{"layer":5,"reason":"queue_full","retry_after":"soon","request_id":"x"}`},
			client.RejectedError{Status: 503, Reason: "queue_full", RequestID: "x"}},
		{"control characters and bad UTF-8", reply{429, nil, "busy\x00\x1b[31m\xff now"},
			client.RejectedError{Status: 429, Message: "busy[31m now"}},
		{"a JSON array", reply{429, nil, `["rate_limited"]`},
			client.RejectedError{Status: 429}},
		{"unparsable Retry-After", reply{429, map[string]string{"Retry-After": "soon"}, `{"retry_after":1}`},
			client.RejectedError{Status: 429, RetryAfter: time.Second}},
		{"negative Retry-After", reply{429, map[string]string{"Retry-After": "-5"}, ``},
			client.RejectedError{Status: 429}},
		{"huge body", reply{503, nil, `{"message":"` + strings.Repeat("x", 200<<10) + `"}`},
			client.RejectedError{Status: 503, Message: `{"message":"` + strings.Repeat("x", 200-len(`{"message":"`))}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newVirtualClock()
			c, _ := newClient(t, clk, client.Config{MaxAttempts: 1})
			_, err := get(context.Background(), c, serve(t, &script{clock: clk, replies: []reply{tt.rep}}))
			got := rejected(t, err)
			if !errors.Is(err, client.ErrAttemptsExhausted) {
				t.Errorf("cause %v, want ErrAttemptsExhausted", got.Cause)
			}
			want := tt.want
			want.Attempts, want.Cause = 1, got.Cause
			if diff := cmp.Diff(want, *got, cmp.Comparer(func(a, b error) bool { return a == b })); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestRejectedErrorMessage(t *testing.T) {
	e := &client.RejectedError{Status: 429, Layer: "rate", Reason: "tenant_quota", RequestID: "c0cd", Message: "Over quota.",
		Attempts: 2, Cause: client.ErrBudgetExhausted}
	want := "client: 429 Too Many Requests (rate: tenant_quota) request_id c0cd: Over quota. [after 2 attempts; client: retry budget exhausted]"
	if got := e.Error(); got != want {
		t.Fatalf("Error() =\n%s\nwant\n%s", got, want)
	}
}

func TestRejectionAsResponse(t *testing.T) {
	clk := newVirtualClock()
	big := rejection(503, 1, "shed", "priority", "r")
	big.body += strings.Repeat(" ", 100<<10) // beyond what the transport reads to decode
	up := &script{clock: clk, replies: []reply{big}}
	c, _ := newClient(t, clk, client.Config{RejectionAsResponse: true, MaxAttempts: 2})
	resp, err := c.Get(serve(t, up))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || string(b) != big.body || len(up.arrivals()) != 2 {
		t.Fatalf("got %d with %d bytes after %d attempts; want the last 503, whole, after 2", resp.StatusCode, len(b), len(up.arrivals()))
	}
}

func TestOtherStatusesPassThrough(t *testing.T) {
	for _, status := range []int{200, 401, 404, 500, 502, 504} {
		clk := newVirtualClock()
		up := &script{clock: clk, replies: []reply{{status: status, header: map[string]string{"Retry-After": "1"}, body: "body"}}}
		c, _ := newClient(t, clk, client.Config{})
		resp, err := c.Get(serve(t, up))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != status || string(b) != "body" || len(up.arrivals()) != 1 {
			t.Errorf("%d: got %d %q after %d attempts", status, resp.StatusCode, b, len(up.arrivals()))
		}
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		cfg  client.Config
		want string
	}{
		{client.Config{MaxAttempts: -1}, "Config.MaxAttempts"},
		{client.Config{MaxWait: -time.Second}, "Config.MaxWait"},
		{client.Config{BackoffBase: -1}, "Config.BackoffBase"},
		{client.Config{MaxBackoff: -1}, "Config.MaxBackoff"},
		{client.Config{Budget: client.BudgetConfig{Ratio: 1.5}}, "Config.Budget.Ratio"},
		{client.Config{Budget: client.BudgetConfig{Window: -1}}, "Config.Budget.Window"},
	}
	for _, tt := range tests {
		_, err := client.New(tt.cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: err %v, want one naming %s", tt.cfg, err, tt.want)
		}
	}
	if _, err := client.NewClient(client.Config{}); err != nil {
		t.Errorf("the zero Config: %v", err)
	}
}
