//go:build !linux

package gateway

import (
	"net"
	"sync"
	"time"
)

// connPoller is the goneWatcher's portable fallback: it watches no
// connection (add is false, so their requests are served unwatched, and a
// client that leaves is noticed when a write to it fails) and only wakes
// the goroutine for its deadline sweeps and for close.
type connPoller struct {
	once sync.Once
	woke chan struct{}
}

func newConnPoller() (*connPoller, error) { return &connPoller{woke: make(chan struct{})}, nil }

func (p *connPoller) wakeUp()                       { p.once.Do(func() { close(p.woke) }) }
func (p *connPoller) release()                      {}
func (p *connPoller) add(*net.TCPConn, uint64) bool { return false }

func (p *connPoller) wait(until time.Time, _ []uint64) (n int, woken bool, err error) {
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	select {
	case <-p.woke:
		return 0, true, nil
	case <-t.C:
		return 0, false, nil
	}
}
