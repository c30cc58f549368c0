package redisstore

import "sync/atomic"

// Stats are a Store's counters since New, for metrics (read them at
// scrape time: the hot path pays one atomic add per decision).
type Stats struct {
	// Redis, DenyCache, Policy and Sync count decisions by source (see
	// Source). A TakeAll counts once.
	Redis, DenyCache, Policy, Sync uint64
	// Overloaded counts the policy decisions caused by ErrOverloaded (a
	// part of Policy): decisions that waited in this instance's own queue
	// past QueueTimeout, with Redis possibly healthy.
	Overloaded uint64
	// RoundTripsOK, RoundTripsSlow and RoundTripsFailed count round trips
	// to Redis (pipelines, or single calls unbatched): answered within
	// Timeout, answered later (still used, and no failure for the
	// breaker), and failed (no reply within three Timeouts, connection,
	// Redis's own health errors).
	RoundTripsOK, RoundTripsSlow, RoundTripsFailed uint64
	// Instances is the number of instances this one counts as sharing the
	// Redis (Store.Instances).
	Instances int
}

// stats are the Store's counters behind Stats.
type stats struct {
	redis, denyCache, policy, overloaded atomic.Uint64
	rtOK, rtSlow, rtFailed               atomic.Uint64
}

// Stats returns the Store's counters now.
func (s *Store) Stats() Stats {
	st := &s.stats
	synced := s.syncer.decisions()
	return Stats{
		Redis: st.redis.Load(), DenyCache: st.denyCache.Load(), Policy: st.policy.Load(), Sync: synced,
		Overloaded:   st.overloaded.Load(),
		RoundTripsOK: st.rtOK.Load(), RoundTripsSlow: st.rtSlow.Load(), RoundTripsFailed: st.rtFailed.Load(),
		Instances: s.Instances(),
	}
}

// roundTrip counts a round trip that took rtt (timeout is Config.Timeout)
// and failed or not.
func (st *stats) roundTrip(failed, slow bool) {
	switch {
	case failed:
		st.rtFailed.Add(1)
	case slow:
		st.rtSlow.Add(1)
	default:
		st.rtOK.Add(1)
	}
}
