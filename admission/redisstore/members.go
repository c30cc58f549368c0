package redisstore

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

//go:embed members.lua
var membersLua string

var membersScript = redis.NewScript(membersLua)

// membersKey is the fleet's membership set. Its hash tag, "m", is neither
// a tenant's (32 hex digits) nor the backstop's ("g"): on Redis Cluster it
// is a key and a slot of its own, touched once per Heartbeat by each
// instance and never by a decision.
const membersKey = keyPrefix + "m}:instances"

// memberTTL is how many heartbeats an entry outlives its last renewal: an
// instance that misses two beats in a row (a slow Redis, a GC pause) is
// still counted; one that stops for three is gone.
const memberTTL = 3

// members is this instance's entry in the fleet's membership and the live
// count it learns from it.
//
// Every instance (whatever Config.Instances says) keeps an entry in
// membersKey, a sorted set scored by when the entry expires on Redis's
// clock, renewed every Heartbeat; an entry not renewed for memberTTL
// heartbeats expires, and Close removes this instance's at once. Each
// renewal returns the number of live entries: the count that sync mode's
// shares, the Local policy's split and the per-instance concurrency caps
// divide by (unless Config.Instances overrides it).
//
// The count is right within one heartbeat of a change, and in the window
// errs one way or the other:
//
//   - An instance that joins counts itself at once (New joins before it
//     returns), so it takes its share from its first decision; the others
//     divide by one fewer until their next renewal, at most Heartbeat
//     later. In that window the fleet may take up to 1/n of each bucket's
//     tokens beyond its quota in sync mode, and 1/n of each quota more
//     under the Local policy (n the fleet's size after the join).
//   - An instance that dies without Close is counted until its entry
//     expires, at most memberTTL heartbeats: the others divide by one
//     more than the fleet, and admit less than their share, never more.
//   - While Redis cannot answer, the count stays where it was; an
//     instance that has never reached Redis counts 1 (itself) and says so
//     in its log.
type members struct {
	s     *Store
	id    string
	fixed int          // Config.Instances: an override; 0 means the live count
	live  atomic.Int64 // the live count last learnt; 0 until the first answer
	stop  chan struct{}
	done  chan struct{}
}

// newMembers joins the fleet, waiting at most the time the first renewal
// may take, and starts the heartbeat.
func newMembers(s *Store) *members {
	var b [8]byte
	_, _ = rand.Read(b[:])
	host, _ := os.Hostname()
	m := &members{s: s, id: fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:])),
		fixed: s.cfg.Instances, stop: make(chan struct{}), done: make(chan struct{})}
	if err := m.beat("join"); err != nil && s.opts.Logger != nil && m.fixed == 0 {
		s.opts.Logger.Warn("redisstore: cannot join the fleet's membership: counting this instance alone until Redis answers",
			"cause", err.Error())
	}
	go m.loop()
	return m
}

// count returns the number of instances sharing the Redis: the override
// when set, and otherwise the live count (at least 1).
func (m *members) count() int {
	if m.fixed > 0 {
		return m.fixed
	}
	return int(max(1, m.live.Load()))
}

// beat renews (op "join") or removes ("leave") this instance's entry and
// learns the live count, within a deadline of half a heartbeat. It goes
// through no breaker: membership is not a decision, and a missed beat
// only leaves the count where it was.
func (m *members) beat(op string) error {
	ctx, cancel := context.WithTimeout(context.Background(), min(m.s.cfg.Heartbeat/2, time.Second))
	defer cancel()
	ttl := memberTTL * m.s.cfg.Heartbeat.Milliseconds()
	n, err := membersScript.Run(ctx, m.s.client, []string{membersKey}, m.id, ttl, op).Int64()
	if err != nil {
		return err
	}
	if op == "join" {
		m.live.Store(max(1, n)) // this instance's entry is in: at least 1
	}
	return nil
}

func (m *members) loop() {
	defer close(m.done)
	t := time.NewTicker(m.s.cfg.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			_ = m.beat("join")
		}
	}
}

// close stops the heartbeat and leaves the fleet, so that the others
// count one fewer at their next renewal instead of after memberTTL
// heartbeats.
func (m *members) close() {
	close(m.stop)
	<-m.done
	_ = m.beat("leave")
}
