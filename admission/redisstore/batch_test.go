package redisstore

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// fakeRuns is a batcher's run function whose round trips end when the test
// says, with the duration it says.
type fakeRuns struct {
	release chan time.Duration // a round trip's duration ends one run
	mu      sync.Mutex
	sizes   []int
}

func (f *fakeRuns) run(batch []*call) (time.Duration, bool) {
	f.mu.Lock()
	f.sizes = append(f.sizes, len(batch))
	f.mu.Unlock()
	rtt := <-f.release
	for _, c := range batch {
		c.v = "ok"
	}
	return rtt, rtt < 0
}

// start runs n calls on b, each on its own goroutine, and returns them and
// a channel of their do errors.
func start(b *batcher, n int) ([]*call, chan error) {
	calls := make([]*call, n)
	errs := make(chan error, n)
	for i := range calls {
		calls[i] = &call{ch: make(chan []*call, 1)}
		go func() { errs <- b.do(context.Background(), calls[i]) }()
		synctest.Wait() // in order: the queue is in arrival order
	}
	return calls, errs
}

// TestBatcherQueueTimeout: calls that waited in the queue past the queue
// timeout fail with ErrOverloaded when the pipeline in flight returns,
// without being sent; later arrivals are sent.
func TestBatcherQueueTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRuns{release: make(chan time.Duration)}
		b := newBatcher(BatchConfig{MaxInFlight: 1, MaxBatch: 8}, 10*time.Millisecond, 5*time.Millisecond, f.run)
		first, _ := start(b, 1)
		old, _ := start(b, 3)
		time.Sleep(20 * time.Millisecond) // the queued calls wait past 10ms
		fresh, _ := start(b, 2)
		f.release <- time.Millisecond // the first round trip ends
		synctest.Wait()
		f.release <- time.Millisecond // the fresh calls' round trip
		synctest.Wait()
		if first[0].v != "ok" {
			t.Errorf("first call: %v, %v", first[0].v, first[0].err)
		}
		for i, c := range old {
			if !errors.Is(c.err, ErrOverloaded) || !errors.Is(c.verdict, ErrOverloaded) || c.v != nil {
				t.Errorf("old call %d: v %v err %v verdict %v, want ErrOverloaded", i, c.v, c.err, c.verdict)
			}
		}
		for i, c := range fresh {
			if c.v != "ok" {
				t.Errorf("fresh call %d: %v, %v", i, c.v, c.err)
			}
		}
		if want := []int{1, 2}; !slices.Equal(f.sizes, want) {
			t.Errorf("pipeline sizes %v, want %v", f.sizes, want)
		}
	})
}

// TestBatcherDepthAdapts: when more calls wait than one pipeline carries
// and round trips are quick, more pipelines go out at once (up to
// MaxInFlight); a slow round trip halves the depth, never below four.
func TestBatcherDepthAdapts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeRuns{release: make(chan time.Duration)}
		b := newBatcher(BatchConfig{MaxInFlight: 6, MaxBatch: 2}, time.Second, 10*time.Millisecond, f.run)
		if got := b.depth(); got != 4 {
			t.Fatalf("initial depth %d, want 4", got)
		}
		start(b, 4)  // four pipelines in flight
		start(b, 20) // queued: more than one pipeline carries
		f.release <- time.Millisecond
		synctest.Wait()
		// 20 queued > 2 a pipeline: depth 5, and two pipelines of 2 sent.
		if got := b.depth(); got != 5 {
			t.Errorf("depth after a quick round trip with a long queue: %d, want 5", got)
		}
		f.release <- time.Millisecond
		synctest.Wait()
		if got := b.depth(); got != 6 {
			t.Errorf("depth: %d, want 6", got)
		}
		f.release <- 8 * time.Millisecond // slow: over half the timeout
		synctest.Wait()
		if got := b.depth(); got != 4 {
			t.Errorf("depth after a slow round trip: %d, want 4", got)
		}
		for range 11 { // drain
			f.release <- time.Millisecond
			synctest.Wait()
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if want := []int{1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}; !slices.Equal(f.sizes, want) {
			t.Errorf("pipeline sizes %v, want %v", f.sizes, want)
		}
	})
}
