package client_test

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fairgate/fairgate/client"
)

// stubTransport answers every request in memory with a 200 carrying
// fairgate's RateLimit headers.
type stubTransport struct{ header http.Header }

func (s stubTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Header: s.header, Body: http.NoBody, Request: r}, nil
}

// benchClock is a lock-free virtual clock: Sleep moves it, so pacing's
// arithmetic runs in full and nothing waits.
type benchClock struct{ ns atomic.Int64 }

func (c *benchClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

func (c *benchClock) Sleep(_ context.Context, d time.Duration) error {
	c.ns.Add(int64(max(d, 0)))
	return nil
}

// BenchmarkRoundTrip measures what the transport adds to an admitted
// request: the budget deposit, the pacing reservation and the parsing of
// the RateLimit headers. "stub" is the base transport alone.
func BenchmarkRoundTrip(b *testing.B) {
	h := http.Header{}
	h.Set("RateLimit-Policy", `"tenant";q=500;w=5`)
	h.Set("RateLimit", `"tenant";r=400;t=1`)
	h.Set("RateLimit-Limit", "500")
	h.Set("RateLimit-Remaining", "400")
	h.Set("RateLimit-Reset", "1")
	stub := stubTransport{h}
	req, _ := http.NewRequest(http.MethodGet, "http://api.test/api/v1/search", nil)
	req.Header.Set("Authorization", "Bearer demo-enterprise-key")
	newTransport := func(b *testing.B, cfg client.Config) http.RoundTripper {
		cfg.Base, cfg.Clock = stub, &benchClock{}
		t, err := client.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		return t
	}
	run := func(b *testing.B, rt http.RoundTripper) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := rt.RoundTrip(req); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("stub", func(b *testing.B) { run(b, stub) })
	b.Run("paced", func(b *testing.B) { run(b, newTransport(b, client.Config{})) })
	b.Run("unpaced", func(b *testing.B) { run(b, newTransport(b, client.Config{DisablePacing: true})) })
	b.Run("paced-parallel", func(b *testing.B) {
		rt := newTransport(b, client.Config{})
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := rt.RoundTrip(req); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// routeStub answers like stubTransport, with the headers of the request's
// path when it has some.
type routeStub struct {
	stubTransport
	byPath map[string]http.Header
}

func (s routeStub) RoundTrip(r *http.Request) (*http.Response, error) {
	h := s.header
	if ph, ok := s.byPath[r.URL.Path]; ok {
		h = ph
	}
	return &http.Response{StatusCode: http.StatusOK, Header: h, Body: http.NoBody, Request: r}, nil
}

// BenchmarkRoundTripRoutes measures pacing by route: "grouped" alternates
// a GET with an export whose responses also name the exports group;
// "many-paths" cycles through more paths than a pace remembers, so that
// every request forgets the least recently used one.
func BenchmarkRoundTripRoutes(b *testing.B) {
	tenant := http.Header{}
	tenant.Set("RateLimit-Policy", `"tenant";q=500;w=5`)
	tenant.Set("RateLimit", `"tenant";r=400;t=1`)
	grouped := http.Header{}
	grouped.Set("RateLimit-Policy", `"tenant";q=500;w=5, "exports";q=1000;w=10`)
	grouped.Set("RateLimit", `"exports";r=900;t=1`)
	newTransport := func(b *testing.B) http.RoundTripper {
		stub := routeStub{stubTransport{tenant}, map[string]http.Header{"/api/v1/reports/export": grouped}}
		t, err := client.New(client.Config{Base: stub, Clock: &benchClock{}})
		if err != nil {
			b.Fatal(err)
		}
		return t
	}
	requests := func(b *testing.B, paths ...string) []*http.Request {
		reqs := make([]*http.Request, len(paths))
		for i, p := range paths {
			reqs[i], _ = http.NewRequest(http.MethodGet, "http://api.test"+p, nil)
			reqs[i].Header.Set("Authorization", "Bearer demo-enterprise-key")
		}
		return reqs
	}
	run := func(b *testing.B, reqs []*http.Request) {
		rt := newTransport(b)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := rt.RoundTrip(reqs[i%len(reqs)]); err != nil {
				b.Fatal(err)
			}
			i++
		}
	}
	b.Run("grouped", func(b *testing.B) { run(b, requests(b, "/api/v1/users/me", "/api/v1/reports/export")) })
	many := make([]string, 1000)
	for i := range many {
		many[i] = "/api/v1/users/" + strconv.Itoa(i)
	}
	b.Run("many-paths", func(b *testing.B) { run(b, requests(b, many...)) })
	b.Run("grouped-parallel", func(b *testing.B) {
		rt := newTransport(b)
		reqs := requests(b, "/api/v1/users/me", "/api/v1/reports/export")
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for i := 0; pb.Next(); i++ {
				if _, err := rt.RoundTrip(reqs[i%2]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
