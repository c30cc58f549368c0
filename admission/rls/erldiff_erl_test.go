package rls_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// erlStartWait bounds how long ERL may take to answer its health check.
const erlStartWait = 15 * time.Second

// isERLTree reports whether dir holds ERL's source: its README, its
// service command and its integration-test runtime.
func isERLTree(dir string) bool {
	for _, p := range []string{"README.md", "src/service_cmd", "test/integration/runtime"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			return false
		}
	}
	return true
}

// findERLSource is ERL_SRC's default: the source tree ERL_BIN was built
// from, as the binary records it (the path of src/service_cmd/main.go in
// its symbol table; a binary built with -trimpath has none), else the ERL
// tree ERL_BIN sits in (an ancestor of its folder, as after
// `go build -o bin/ ./src/service_cmd`). Either must still be an ERL
// tree; otherwise ERL_SRC is required.
func findERLSource(bin string) (string, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	const mainGo = "/src/service_cmd/main.go"
	for rest := data; ; {
		i := bytes.Index(rest, []byte(mainGo))
		if i < 0 {
			break
		}
		j := i
		for j > 0 && rest[j-1] > ' ' && rest[j-1] < 0x7f {
			j--
		}
		if dir := filepath.FromSlash(string(rest[j:i])); dir != "" && isERLTree(dir) {
			return dir, nil
		}
		rest = rest[i+len(mainGo):]
	}
	dir, err := filepath.Abs(filepath.Dir(bin))
	if err != nil {
		return "", err
	}
	for {
		if isERLTree(dir) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("ERL_BIN %s records no ERL source tree that is still there, and sits in none: set ERL_SRC", bin)
		}
		dir = parent
	}
}

// erlProc is a running ERL service_cmd.
type erlProc struct {
	cmd    *exec.Cmd
	exited chan error
	conn   *grpc.ClientConn
	client rlsv3.RateLimitServiceClient
	// loadErr is ERL's error loading the config, "" when it loaded.
	loadErr string
}

// erlSettings are what a run changes in ERL's environment.
type erlSettings struct {
	runtimeRoot string // RUNTIME_ROOT; the configs are in ratelimit/config below it
	redisAddr   string
	headers     bool // LIMIT_RESPONSE_HEADERS_ENABLED
	shadow      bool // SHADOW_MODE
}

// startERL runs bin on s: every port a free loopback one, statistics off,
// the environment nothing but these settings. It returns once ERL's health
// check answers, or an error (ports taken between asking and binding are
// retried).
func startERL(bin, dir string, s erlSettings) (*erlProc, error) {
	var err error
	for attempt := range 3 {
		var p *erlProc
		if p, err = startERLOnce(bin, filepath.Join(dir, "erl-"+strconv.Itoa(attempt)+".log"), s); err == nil {
			return p, nil
		}
	}
	return nil, err
}

func startERLOnce(bin, logPath string, s erlSettings) (*erlProc, error) {
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	env := []string{
		"USE_STATSD=false",
		"LOG_LEVEL=warn",
		"RUNTIME_ROOT=" + s.runtimeRoot,
		"RUNTIME_SUBDIRECTORY=ratelimit",
		"RUNTIME_APPDIRECTORY=config",
		"RUNTIME_IGNOREDOTFILES=true",
		"REDIS_SOCKET_TYPE=tcp",
		"REDIS_URL=" + s.redisAddr,
		"CACHE_KEY_PREFIX=erldiff_",
		"HOST=127.0.0.1", "GRPC_HOST=127.0.0.1", "DEBUG_HOST=127.0.0.1",
		"GRPC_PORT=" + strconv.Itoa(ports[0]),
		"PORT=" + strconv.Itoa(ports[1]),
		"DEBUG_PORT=" + strconv.Itoa(ports[2]),
		"LIMIT_RESPONSE_HEADERS_ENABLED=" + strconv.FormatBool(s.headers),
		"SHADOW_MODE=" + strconv.FormatBool(s.shadow),
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, logf, logf
	erlProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start ERL: %w", err)
	}
	p := &erlProc{cmd: cmd, exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait() }()
	health := "http://127.0.0.1:" + strconv.Itoa(ports[1]) + "/healthcheck"
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(erlStartWait)
	for {
		if resp, err := hc.Get(health); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-p.exited:
			b, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("ERL exited (%v): %s", err, lastLines(string(b), 5))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("ERL: no health check answer within %v", erlStartWait)
		}
	}
	// ERL reads the configs before it listens: a load error is logged by
	// now.
	b, _ := os.ReadFile(logPath)
	for _, l := range strings.Split(string(b), "\n") {
		if _, msg, ok := strings.Cut(l, "Error loading new configuration: "); ok {
			p.loadErr = strings.TrimSuffix(msg, `"`)
		}
	}
	p.conn, err = grpc.NewClient("127.0.0.1:"+strconv.Itoa(ports[0]), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		p.stop()
		return nil, err
	}
	p.client = rlsv3.NewRateLimitServiceClient(p.conn)
	return p, nil
}

// stop ends the process by its PID, SIGTERM then, after 5 s, SIGKILL,
// and waits for it.
func (p *erlProc) stop() {
	if p.conn != nil {
		p.conn.Close()
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return
	case <-time.After(5 * time.Second):
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// ShouldRateLimit asks ERL, within 5 s.
func (p *erlProc) ShouldRateLimit(req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return p.client.ShouldRateLimit(ctx, req)
}

// freePorts asks the kernel for n free loopback ports. They are closed
// again before use, so another process may take one: callers retry.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(ls[max(0, len(ls)-n):], "\n")
}

// errERLBin is returned for an ERL_BIN that is not an executable file.
var errERLBin = errors.New("ERL_BIN: not an executable file")

func checkERLBin(bin string) error {
	st, err := os.Stat(bin)
	if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%w: %s", errERLBin, bin)
	}
	return nil
}
