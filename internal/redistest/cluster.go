package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of three masters and no replicas, each a
// Server on its own free loopback port.
type Cluster struct {
	Servers []*Server
}

// Addrs returns the masters' host:port addresses.
func (c *Cluster) Addrs() []string {
	a := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		a[i] = s.Addr()
	}
	return a
}

// StartCluster starts three cluster-enabled redis-server processes, joins
// them with `redis-cli --cluster create` (16384 slots over three masters)
// and waits until every node reports cluster_state:ok.
func StartCluster(t testing.TB) *Cluster {
	t.Helper()
	_, cli := binaries(t)
	c := &Cluster{}
	for range 3 {
		bus, err := freePort()
		if err != nil {
			t.Fatalf("redistest: free port for the cluster bus: %v", err)
		}
		c.Servers = append(c.Servers, StartServer(t, WithArgs(
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", "2000",
		)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(startWait)
	for _, s := range c.Servers {
		for {
			info, err := Do(s.Addr(), "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster node %s not ok within %v: %v %q", s.Addr(), startWait, err, info)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return c
}

// Do sends one command to addr on a fresh connection and returns the reply
// as text: a status, an integer, a bulk string, or the elements of an array
// of those joined by newlines. An error reply is returned as an error. It is
// for test setup and inspection (CLUSTER INFO, INFO, CLIENT PAUSE), not for
// load.
func Do(addr string, args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	return readReply(bufio.NewReader(c))
}

func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("redistest: empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], nil
	case '-':
		return "", errors.New(line[1:])
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return "", err
		}
		parts := make([]string, 0, max(n, 0))
		for range n {
			p, err := readReply(r)
			if err != nil {
				return "", err
			}
			parts = append(parts, p)
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("redistest: unexpected reply %q", line)
}
