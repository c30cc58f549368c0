package gateway

import (
	"sync"
	"time"

	"github.com/fairgate/fairgate/admission"
)

// historySampler keeps the console's history (GET /admin/history): it
// samples the gate's tenants and pools every interval, from New until
// Close, stamping each sample with the server's clock.
type historySampler struct {
	h        *admission.History
	stop     chan struct{}
	done     chan struct{} // closed when run has returned
	stopOnce sync.Once
}

// startHistory starts sampling g every interval (admission.HistoryResolution
// in a server).
func startHistory(g *admission.Gate, now func() time.Time, interval time.Duration) *historySampler {
	s := &historySampler{h: admission.NewHistory(g, now()), stop: make(chan struct{}), done: make(chan struct{})}
	go s.run(now, interval)
	return s
}

func (s *historySampler) run(now func() time.Time, interval time.Duration) {
	defer close(s.done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			s.h.Sample(now())
		}
	}
}

// close stops the sampling and waits until it has stopped. It may be
// called more than once.
func (s *historySampler) close() error {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.done
	return nil
}
