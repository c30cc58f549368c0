package ratelimit

import (
	"context"
	"fmt"
	"math"

	"github.com/fairgate/fairgate/internal/fairshare"
)

// BackstopLimit is the fair global backstop's capacity: Rate tokens a
// second up to Burst, shared by the tenants active over about the last
// Window by weighted max-min fair share.
type BackstopLimit = fairshare.BackstopLimit

// BackstopResult is a store's answer for one request at the backstop.
type BackstopResult = fairshare.BackstopResult

// BackstopRequest is one request at the backstop: its tenant, the tenant's
// weight, its cost and its class (which of an above-share tenant's
// requests go first).
type BackstopRequest = fairshare.BackstopRequest

// BackstopClass orders an above-share tenant's requests at the backstop:
// sheddable ones are refused first, critical ones last.
type BackstopClass = fairshare.Class

// The backstop's classes.
const (
	BackstopCritical  = fairshare.Critical
	BackstopDefault   = fairshare.Default
	BackstopSheddable = fairshare.Sheddable
)

// BackstopStore keeps the fair global backstop: one bucket of the global
// rate that refuses only tenants above their fair shares of it while
// another tenant is within its own (see fairshare.Backstop for the rule).
// The embedded MemoryStore and the Redis store satisfy it; for Redis it is
// one script call, so every instance sees one backstop.
//
// TakeBackstop decides one request. The error is for infrastructure
// faults only.
type BackstopStore interface {
	TakeBackstop(ctx context.Context, l BackstopLimit, r BackstopRequest) (BackstopResult, error)
}

// TakeBackstop implements BackstopStore. It never returns an error. All
// tenants share one lock here, as they share one bucket.
func (s *MemoryStore) TakeBackstop(_ context.Context, l BackstopLimit, r BackstopRequest) (BackstopResult, error) {
	now := s.Clock() // monotonic, as the buckets'
	s.backstopMu.Lock()
	defer s.backstopMu.Unlock()
	return s.backstop.Take(now, l, r), nil
}

var _ BackstopStore = (*MemoryStore)(nil)

// BackstopSettler settles a settled request's usage at the fair global
// backstop, as Settler does at the tenant's buckets: cost is what it used
// less what it reserved (signed), charged or refunded to the backstop's
// bucket (no lower than its reserve, −Burst, no higher than Burst) and
// counted in the tenant's rates, so that fair shares are by what
// tenants used, not by what their routes reserved. The embedded
// MemoryStore and the Redis store satisfy it. The error is for invalid
// arguments and infrastructure faults: the caller logs it, and the
// reserve stands.
type BackstopSettler interface {
	SettleBackstop(ctx context.Context, l BackstopLimit, tenant string, cost float64) error
}

// SettleBackstop implements BackstopSettler at the store's clock.
func (s *MemoryStore) SettleBackstop(_ context.Context, l BackstopLimit, tenant string, cost float64) error {
	if math.IsNaN(cost) || math.IsInf(cost, 0) || !positiveFinite(l.Rate) || !positiveFinite(l.Burst) || l.Window <= 0 {
		return fmt.Errorf("%w: settle backstop: rate %v, burst %v, window %v, cost %v", ErrInvalidTake, l.Rate, l.Burst, l.Window, cost)
	}
	now := s.Clock()
	s.backstopMu.Lock()
	defer s.backstopMu.Unlock()
	s.backstop.Settle(now, l, tenant, cost)
	return nil
}

var _ BackstopSettler = (*MemoryStore)(nil)
