package ratelimit

import (
	"context"

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
