// Package redistest starts real redis-server processes for tests: a single
// node on a free loopback port, or a three-master Redis Cluster. Each process
// is stopped by PID when the test ends.
//
// When redis-server is not installed the test is skipped, unless the
// environment sets FAIRGATE_REQUIRE_REDIS=1 (as `make test` does), in which
// case it fails: CI must not pass by skipping.
package redistest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// RequireEnv is the environment variable that turns a missing redis-server
// from a skip into a failure.
const RequireEnv = "FAIRGATE_REQUIRE_REDIS"

// startWait bounds how long a server may take to answer PING.
const startWait = 10 * time.Second

// Option adjusts a server before it starts.
type Option func(*serverConfig)

type serverConfig struct {
	args []string
	tls  *PKI
}

// WithArgs passes extra command-line arguments to redis-server, for example
// WithArgs("--maxmemory", "10mb").
func WithArgs(args ...string) Option {
	return func(c *serverConfig) { c.args = append(c.args, args...) }
}

// Server is one redis-server process. Its methods are safe for concurrent
// use; Addr stays the same across Kill and Restart.
type Server struct {
	t       testing.TB
	bin     string
	dir     string
	port    int
	tlsPort int    // 0: no TLS listener
	conf    string // written to dir/redis.conf and passed first, when set
	args    []string

	mu     sync.Mutex
	proc   *os.Process // nil while killed
	exited chan error  // receives the process's exit once
}

// binaries returns the paths of redis-server and redis-cli, or skips (or
// fails, under RequireEnv) when they are missing.
func binaries(t testing.TB) (server, cli string) {
	t.Helper()
	server, err1 := exec.LookPath("redis-server")
	cli, err2 := exec.LookPath("redis-cli")
	if err1 == nil && err2 == nil {
		return server, cli
	}
	msg := "redistest: redis-server and redis-cli are not installed (Debian: apt-get install -y redis-server)"
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s; %s=1 requires them", msg, RequireEnv)
	}
	t.Skip(msg)
	return "", ""
}

// StartServer starts a redis-server with no persistence on a free
// 127.0.0.1 port, waits until it answers PING and stops it when t ends.
func StartServer(t testing.TB, opts ...Option) *Server {
	t.Helper()
	bin, _ := binaries(t)
	var c serverConfig
	for _, o := range opts {
		o(&c)
	}
	s := &Server{t: t, bin: bin, dir: t.TempDir(), args: c.args}
	if c.tls != nil {
		s.args = append(s.args, "--tls-cert-file", c.tls.CertFile, "--tls-key-file", c.tls.KeyFile,
			"--tls-ca-cert-file", c.tls.CAFile, "--tls-auth-clients", "no")
	}
	s.launch(c.tls != nil)
	return s
}

// launch starts s on free ports (and a TLS one too when tls), retrying
// a few times, and stops it when the test ends.
func (s *Server) launch(tls bool) {
	s.t.Helper()
	// A port found free can be taken before redis binds it; try a few.
	var err error
	for range 5 {
		if s.port, err = freePort(); err != nil {
			continue
		}
		if tls {
			if s.tlsPort, err = freePort(); err != nil {
				continue
			}
		}
		if err = s.start(); err == nil {
			break
		}
	}
	if err != nil {
		s.t.Fatalf("redistest: start %s: %v", s.bin, err)
	}
	s.t.Cleanup(s.Kill)
}

// TLSAddr returns the host:port of the TLS listener (WithTLS), or "".
func (s *Server) TLSAddr() string {
	if s.tlsPort == 0 {
		return ""
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.tlsPort))
}

// Addr returns host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// Kill stops the server at once (SIGKILL) and waits for the process to exit.
// Killing a killed server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return
	}
	_ = s.proc.Kill()
	<-s.exited
	s.proc, s.exited = nil, nil
}

// Restart kills the server if it runs and starts an empty one on the same
// port, waiting until it answers PING.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	var err error
	// The kernel may hold the port briefly; retry for a bounded time.
	deadline := time.Now().Add(startWait)
	for {
		if err = s.start(); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatalf("redistest: restart redis-server on %s: %v", s.Addr(), err)
	}
}

// start launches the process and waits for PING. It reports an error (and
// leaves nothing running) when the server exits or does not answer.
func (s *Server) start() error {
	var args []string
	if s.conf != "" {
		conf := filepath.Join(s.dir, "redis.conf")
		if _, err := os.Stat(conf); err != nil { // a sentinel rewrites its own
			if err := os.WriteFile(conf, []byte(s.conf), 0o600); err != nil {
				return err
			}
		}
		args = append(args, conf)
	}
	if s.tlsPort != 0 {
		args = append(args, "--tls-port", strconv.Itoa(s.tlsPort))
	}
	args = append(args,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--logfile", "",
		"--loglevel", "warning")
	args = append(args, s.args...)
	cmd := exec.Command(s.bin, args...)
	logf, err := os.Create(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.Now().Add(startWait)
	for {
		if ping(s.Addr()) == nil {
			s.mu.Lock()
			s.proc, s.exited = cmd.Process, exited
			s.mu.Unlock()
			return nil
		}
		select {
		case err := <-exited:
			b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("exited (%v): %s", err, strings.TrimSpace(string(b)))
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-exited
			return fmt.Errorf("no PING answer on %s within %v", s.Addr(), startWait)
		}
	}
}

// ping expects PONG from addr.
func ping(addr string) error {
	r, err := Do(addr, "PING")
	if err == nil && r != "PONG" {
		err = fmt.Errorf("PING answered %q", r)
	}
	return err
}

// Do sends one command to the server; see the package-level Do.
func (s *Server) Do(args ...string) (string, error) { return Do(s.Addr(), args...) }

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Pid returns the server's process ID, or 0 while it is killed.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.Pid
}
