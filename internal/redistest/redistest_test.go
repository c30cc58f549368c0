package redistest

import (
	"strings"
	"testing"
)

func TestServerKillRestart(t *testing.T) {
	s := StartServer(t)
	if _, err := s.Do("SET", "k", "v"); err != nil {
		t.Fatalf("SET: %v", err)
	}
	s.Kill()
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("PING after Kill: got nil error, want a refused connection")
	}
	s.Restart()
	got, err := s.Do("EXISTS", "k")
	if err != nil || got != "0" {
		t.Fatalf("EXISTS k after Restart = %q, %v; want 0 (empty server)", got, err)
	}
}

func TestCluster(t *testing.T) {
	c := StartCluster(t)
	if len(c.Addrs()) != 3 {
		t.Fatalf("got %d masters, want 3", len(c.Addrs()))
	}
	info, err := Do(c.Addrs()[0], "CLUSTER", "INFO")
	if err != nil || !strings.Contains(info, "cluster_known_nodes:3") {
		t.Fatalf("CLUSTER INFO = %q, %v; want 3 known nodes", info, err)
	}
}
