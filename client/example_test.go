package client_test

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/fairgate/fairgate/client"
)

func Example() {
	// An API behind fairgate whose tenant is over its quota.
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":"rate_limited","message":"Tenant initech is over its starter rate quota.",`+
			`"layer":"rate","reason":"tenant_quota","retry_after":1,"request_id":"c0cd52f16063a73c"}`)
	}))
	defer api.Close()

	c, err := client.NewClient(client.Config{}) // the defaults: 3 attempts, waits ≤ 30s, a 10% retry budget, pacing
	if err != nil {
		log.Fatal(err)
	}
	// A POST without an Idempotency-Key is never retried: its 429 comes
	// back at once, as a typed error. (A GET would be retried after the
	// Retry-After.)
	_, err = c.Post(api.URL+"/api/v1/reports/export", "application/json", strings.NewReader(`{}`))
	var rej *client.RejectedError
	if errors.As(err, &rej) {
		fmt.Println(rej.Status, rej.Layer, rej.Reason, rej.RetryAfter, rej.RequestID)
		fmt.Println(rej.Message)
		fmt.Println(errors.Is(err, client.ErrNotRetryable))
	}
	// Output:
	// 429 rate tenant_quota 1s c0cd52f16063a73c
	// Tenant initech is over its starter rate quota.
	// true
}
