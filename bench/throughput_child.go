package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fairgate/fairgate/admission/gateway"
	"github.com/fairgate/fairgate/internal/demoapi"
)

// child is a server of the throughput scenario running as a child
// process on one core, so that /proc/PID/stat is the server's own CPU.
type child struct {
	cmd *exec.Cmd
	url string
	dir string // removed at stop, when set
}

// h2Listen says a server of the run listens for HTTP/2: h2c, or over TLS
// with cert and key when they are set.
type h2Listen struct{ cert, key string }

func (h *h2Listen) tls() bool { return h != nil && h.cert != "" }

// The environment a bench-server child of a TLS run reads its certificate
// from.
const (
	envBenchTLSCert = "FAIRGATE_BENCH_TLS_CERT"
	envBenchTLSKey  = "FAIRGATE_BENCH_TLS_KEY"
)

// startChild runs `BINARY bench-server MODE UPSTREAM` with GOMAXPROCS=1
// (over TLS when h2 says so) and waits for the address it prints.
func startChild(ctx context.Context, bin, mode, upstream string, h2 *h2Listen) (*child, error) {
	if bin == "" {
		return nil, errors.New("bench: throughput needs the fairgate binary")
	}
	cmd := exec.CommandContext(ctx, bin, "bench-server", mode, upstream)
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	scheme := "http://"
	if h2.tls() {
		cmd.Env = append(cmd.Env, envBenchTLSCert+"="+h2.cert, envBenchTLSKey+"="+h2.key)
		scheme = "https://"
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("bench: %s server: %w", mode, err)
	}
	return &child{cmd: cmd, url: scheme + strings.TrimSpace(line)}, nil
}

func (c *child) stop() {
	c.cmd.Process.Signal(os.Interrupt)
	c.cmd.Wait()
	if c.dir != "" {
		os.RemoveAll(c.dir)
	}
}

func (c *child) cpu() time.Duration { return cpuOf(c.cmd.Process.Pid) }

// cpuOf is the user+system CPU time of process pid so far, from
// /proc/PID/stat (fields 14 and 15, in clock ticks of 1/100 s).
func cpuOf(pid int) time.Duration {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; the fields after it
	// start after its closing parenthesis.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// ServeThroughputChild is the bench-server subcommand: it serves mode
// ("upstream", "demo-upstream" (the demo API), or in front of upstream
// "reverseproxy", "fairgate", "fairgate-gc100" (server.gc_percent 100,
// Go's default), "fairgate-fasthttp" (server.engine: fasthttp),
// "fairgate-demo" or "fairgate-demo-fasthttp" (the demo config)) on a
// loopback port, prints the address, and serves until ctx is done.
func ServeThroughputChild(ctx context.Context, mode, upstream string, stdout io.Writer) error {
	var h http.Handler
	switch mode {
	case "upstream":
		body := []byte(`{"id":"me","name":"bench"}` + "\n")
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Content-Type"] = []string{"application/json"}
			w.Write(body)
		})
	case "reverseproxy":
		target, err := url.Parse(upstream)
		if err != nil {
			return err
		}
		h = &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target); pr.SetXForwarded() },
			Transport: proxyTransport(), ErrorLog: discardLog}
	case "demo-upstream":
		h = demoapi.New(demoapi.Config{Connections: 16})
	case "fairgate", "fairgate-gc100", "fairgate-fasthttp", "fairgate-demo", "fairgate-demo-fasthttp":
		// The gateway as fairgate serve runs it (Server.Serve: its engine,
		// timeouts and listeners), on the scenario's config or the demo's.
		config := throughputConfig
		if strings.HasPrefix(mode, "fairgate-demo") {
			config = demoConfig
		}
		cfg, err := config(upstream)
		if err != nil {
			return err
		}
		if mode == "fairgate-gc100" {
			cfg.Server.GCPercent = 100 // Go's default, to compare with fairgate's
		}
		if strings.HasSuffix(mode, "-fasthttp") {
			cfg.Server.Engine = gateway.EngineFast
		}
		if cert := os.Getenv(envBenchTLSCert); cert != "" {
			cfg.Server.TLS = &gateway.TLSConfig{CertFile: cert, KeyFile: os.Getenv(envBenchTLSKey)}
		}
		gw, err := gateway.New(cfg, gateway.Options{})
		if err != nil {
			return err
		}
		gateway.ApplyGC(gw.Config().Server, os.Getenv)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		aln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, ln.Addr())
		if err := gw.Serve(ctx, ln, aln, gateway.Shutdown{}); err != nil {
			return err
		}
		return gw.Close()
	default:
		return fmt.Errorf("bench: unknown server mode %q", mode)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	fmt.Fprintln(stdout, ln.Addr())
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
