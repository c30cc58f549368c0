package client

import (
	"context"
	"time"
)

// Clock is the transport's time: what it reads to decide and how it waits.
// Tests pass a fake whose Sleep moves its own time forward.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// Sleep waits for d, or until ctx is done, whichever comes first. It
	// returns nil after a full wait and ctx.Err() otherwise.
	Sleep(ctx context.Context, d time.Duration) error
}

// systemClock is the Clock of a Config without one.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
