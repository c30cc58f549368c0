package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// MasterName is the name the Sentinels of StartSentinels monitor.
const MasterName = "fairgate"

// Sentinels are redis-sentinel processes monitoring one master.
type Sentinels struct {
	Servers []*Server
}

// Addrs returns the Sentinels' host:port addresses.
func (s *Sentinels) Addrs() []string {
	a := make([]string, len(s.Servers))
	for i, srv := range s.Servers {
		a[i] = srv.Addr()
	}
	return a
}

// StartSentinels starts n redis-sentinel processes (Debian's
// redis-sentinel package) monitoring master as MasterName with a quorum
// of n/2+1, quick to fail over: the master is down after 300 ms without
// an answer. Replicas are found through the master.
func StartSentinels(t testing.TB, master *Server, n int) *Sentinels {
	t.Helper()
	bin, err := exec.LookPath("redis-sentinel")
	if err != nil {
		msg := "redistest: redis-sentinel is not installed (Debian: apt-get install -y redis-sentinel)"
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("%s; %s=1 requires it", msg, RequireEnv)
		}
		t.Skip(msg)
	}
	conf := strings.Join([]string{
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d %d", MasterName, master.port, n/2+1),
		"sentinel down-after-milliseconds " + MasterName + " 300",
		"sentinel failover-timeout " + MasterName + " 2000",
		"sentinel parallel-syncs " + MasterName + " 1",
		"",
	}, "\n")
	ss := &Sentinels{}
	for range n {
		s := &Server{t: t, bin: bin, dir: t.TempDir(), conf: conf}
		s.launch(false)
		ss.Servers = append(ss.Servers, s)
	}
	return ss
}

// WaitMaster waits (up to 10 s) until every Sentinel names a master at
// addr, and fails t otherwise.
func (s *Sentinels) WaitMaster(t testing.TB, addr string) {
	t.Helper()
	deadline := time.Now().Add(startWait)
	for _, srv := range s.Servers {
		for {
			got, err := srv.Do("SENTINEL", "get-master-addr-by-name", MasterName)
			if err == nil && strings.ReplaceAll(got, "\n", ":") == addr {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: sentinel %s names master %q (%v), want %s", srv.Addr(), got, err, addr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// WaitReplica waits (up to 10 s) until replica reports a link to its
// master that is up, and fails t otherwise.
func WaitReplica(t testing.TB, replica *Server) {
	t.Helper()
	deadline := time.Now().Add(startWait)
	for {
		info, err := replica.Do("INFO", "replication")
		if err == nil && strings.Contains(info, "master_link_status:up") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: replica %s not linked within %v: %v %q", replica.Addr(), startWait, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Port returns the server's plain TCP port.
func (s *Server) Port() int { return s.port }
