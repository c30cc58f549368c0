package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fairgate/fairgate/admission/ratelimit"
	"github.com/fairgate/fairgate/internal/redistest"
)

// TestSentinelFailover: a master, its replica and three real Sentinels;
// the master is killed during traffic. No decision errs or waits long,
// the failure policy decides during the failover, and once the Sentinels
// have promoted the replica, decisions come from Redis again, from the
// new master, without intervention.
func TestSentinelFailover(t *testing.T) {
	master := redistest.StartServer(t)
	replica := redistest.StartServer(t, redistest.WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(master.Port())))
	redistest.WaitReplica(t, replica)
	sentinels := redistest.StartSentinels(t, master, 3)
	sentinels.WaitMaster(t, master.Addr())
	s := newTestStore(t, sentinels.Addrs(), func(c *Config) {
		c.MasterName, c.Cluster = redistest.MasterName, false
		c.Breaker.OpenFor = 100 * time.Millisecond
	}, Options{})
	untilFromRedis(t, s, ratelimit.BucketKey{Tenant: "warm"})
	tr := startTraffic(t, 8, func(w, i int) (Outcome, error) {
		k := ratelimit.BucketKey{Tenant: []string{"a", "b", "c", "d"}[(w+i)%4]}
		_, out, err := s.Decide(context.Background(), k, bigLimit, 1)
		return out, err
	})
	tr.waitFor("Redis decisions", func() bool { return tr.count(FromRedis) > 500 })
	master.Kill()
	tr.waitFor("policy decisions", func() bool { return tr.count(FromPolicy) > 100 })
	sentinels.WaitMaster(t, replica.Addr())
	n := tr.count(FromRedis)
	tr.waitFor("Redis decisions after the failover", func() bool { return tr.count(FromRedis) > n+500 })
	if d := tr.end(); d > 250*time.Millisecond {
		t.Errorf("slowest decision %v, want < 250ms", d)
	}
	if got := commandStat(t, replica.Addr(), "evalsha", "calls"); got == 0 {
		t.Error("the promoted replica ran no script: decisions did not move to the new master")
	}
	t.Logf("redis %d, policy %d", tr.count(FromRedis), tr.count(FromPolicy))
}

// TestTLS: a real redis-server listening with TLS (tls-port) and a
// certificate from a CA made in the test. A store that trusts the CA
// decides from Redis; one that does not, or that speaks plain TCP to the
// TLS port, cannot reach it and the policy decides.
func TestTLS(t *testing.T) {
	pki := redistest.NewPKI(t)
	srv := redistest.StartServer(t, redistest.WithTLS(pki))
	addr := srv.TLSAddr()
	k := ratelimit.BucketKey{Tenant: "tls"}
	s := newTestStore(t, []string{addr}, func(c *Config) {
		c.TLS = TLSConfig{Enabled: true, CAFile: pki.CAFile}
		c.Timeout = 100 * time.Millisecond // a cold TLS handshake, under -race
	}, Options{})
	untilFromRedis(t, s, k)
	if got := commandStat(t, srv.Addr(), "evalsha", "calls") + commandStat(t, srv.Addr(), "eval", "calls"); got == 0 {
		t.Fatal("no script ran on the server")
	}
	// The server really speaks TLS there, and the CA really is checked.
	client, err := NewClient(Config{Addrs: []string{addr}, TLS: TLSConfig{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var ve *tls.CertificateVerificationError
	if err := client.Ping(context.Background()).Err(); !errors.As(err, &ve) {
		t.Errorf("PING without the test CA: %v, want a certificate verification error", err)
	}
	plain := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer plain.Close()
	if err := plain.Ping(context.Background()).Err(); err == nil || strings.Contains(err.Error(), "PONG") {
		t.Errorf("plain TCP PING to the TLS port: %v, want a failure", err)
	}
}
