package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fairgate/fairgate/client"
)

// handlerTransport serves requests with a handler in memory: no network,
// so a synctest bubble's clock advances whenever every goroutine waits.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	sr := r.Clone(r.Context()) // as a server sees it: never a nil body, a peer address
	if sr.Body == nil {
		sr.Body = http.NoBody
	}
	sr.RemoteAddr, sr.RequestURI = "192.0.2.1:40000", r.URL.RequestURI()
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, sr)
	sr.Body.Close()
	resp := rec.Result()
	resp.Request = r // as http.Transport sets it (the gateway's proxy reads it)
	return resp, nil
}

// TestSystemClock runs the transport on its default clock inside a
// synctest bubble, where time.Now and timers are fake: the waits are the
// real code path, measured exactly.
func TestSystemClock(t *testing.T) {
	newTransport := func(t *testing.T, up *script, cfg client.Config) *http.Client {
		cfg.Base = handlerTransport{up}
		c, err := client.NewClient(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	t.Run("Retry-After is waited", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			up := &script{clock: newVirtualClock(), replies: []reply{rejection(429, 2, "rate", "tenant_quota", "r"), {status: 200}}}
			c := newTransport(t, up, client.Config{})
			start := time.Now()
			if status, err := get(context.Background(), c, "http://api.test/"); status != 200 {
				t.Fatalf("%d, %v", status, err)
			}
			if d := time.Since(start); d != 2*time.Second {
				t.Fatalf("took %v, want exactly 2s", d)
			}
		})
	})
	t.Run("cancel ends a wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			up := &script{clock: newVirtualClock(), replies: []reply{rejection(429, 10, "rate", "tenant_quota", "r")}}
			c := newTransport(t, up, client.Config{})
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(time.Second, cancel)
			start := time.Now()
			_, err := get(ctx, c, "http://api.test/")
			if rej := rejected(t, err); !errors.Is(err, context.Canceled) || rej.Reason != "tenant_quota" {
				t.Fatalf("err %v, want the 429 with context.Canceled", err)
			}
			if d := time.Since(start); d != time.Second {
				t.Fatalf("returned after %v, want at the cancel (1s)", d)
			}
		})
	})
	t.Run("retries stop before the deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			up := &script{clock: newVirtualClock(), replies: []reply{rejection(503, 1, "shed", "priority", "r")}}
			c := newTransport(t, up, client.Config{MaxAttempts: 100, Budget: client.BudgetConfig{Disabled: true}})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := get(ctx, c, "http://api.test/")
			if !errors.Is(err, client.ErrDeadline) || errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err %v, want ErrDeadline before the context expires", err)
			}
			if dl, _ := ctx.Deadline(); !time.Now().Before(dl) {
				t.Fatalf("returned at the deadline, not before it")
			}
		})
	})
}

// TestConcurrentUse shares one transport among goroutines (for the race
// detector): every request ends in a response or a RejectedError, and the
// counters agree with what the upstream saw.
func TestConcurrentUse(t *testing.T) {
	clk := newVirtualClock()
	up := &tokenBucket{clock: clk, burst: 25, rate: 5}
	c, tr := newClient(t, clk, client.Config{})
	url := serve(t, up)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 25 {
				status, err := get(context.Background(), c, url)
				if status != 200 && !errors.As(err, new(*client.RejectedError)) {
					t.Errorf("%d, %v", status, err)
				}
			}
		})
	}
	wg.Wait()
	admitted, limited, _ := up.counts()
	if st := tr.Stats(); st.Requests != 200 || st.Attempts != int64(admitted+limited) || st.Rejections != int64(limited) {
		t.Fatalf("stats %+v; upstream %d admitted, %d limited", st, admitted, limited)
	}
}
