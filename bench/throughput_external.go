package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// skipReason says why an external server's mode is skipped: the only
// reason is a missing binary.
func skipReason(name string) string {
	return name + " is not installed (make bench-deps)"
}

// nginxConf is nginx in front of the upstream, limiting by key as the
// issue's comparison did: limit_req keyed by the Authorization header, the
// flood key at one request a minute, every other key far from binding.
const nginxConf = nginxHead + `  map $http_authorization $flood { "Bearer {{flood}}" $http_authorization; default ""; }
  map $http_authorization $tenant { "Bearer {{flood}}" ""; default $http_authorization; }
  limit_req_zone $flood zone=flood:1m rate=1r/m;
  limit_req_zone $tenant zone=tenants:10m rate=1000000r/s;
` + nginxLocation + `      limit_req zone=flood nodelay;
      limit_req zone=tenants burst=1000000 nodelay;
` + nginxTail

// An nginx config of the scenario is nginxHead, its zones (lines of the
// http block), nginxLocation, its limits (lines of the one location) and
// nginxTail: one process (master_process off, so /proc/PID/stat is the
// server's), no logs, files in the run's directory, 429 for a request over
// a limit, the proxy to the upstream with keep-alive.
const (
	nginxHead = `worker_processes 1;
error_log {{dir}}/error.log crit;
pid {{dir}}/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path {{dir}}/tmp;
  proxy_temp_path {{dir}}/tmp;
  fastcgi_temp_path {{dir}}/tmp;
  uwsgi_temp_path {{dir}}/tmp;
  scgi_temp_path {{dir}}/tmp;
  limit_req_status 429;
  upstream up { server {{upstream}}; keepalive 64; }
`
	nginxLocation = `  server {
    listen {{listen}}{{listenopts}};{{tls}}
    location / {
`
	nginxTail = `      proxy_pass http://up;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
`
)

// haproxyConf is HAProxy in front of the upstream, one thread, limiting by
// key with a stick table as the comparison did: every key
// tracked, the flood key denied (429) above one request a minute.
const haproxyConf = `global
  nbthread 1
  maxconn 4096
defaults
  mode http
  timeout connect 2s
  timeout client 30s
  timeout server 30s
  http-reuse always
frontend fe
  bind {{listen}}
  stick-table type string len 128 size 100k expire 60s store http_req_rate(60s)
  http-request track-sc0 req.hdr(authorization)
  acl flood req.hdr(authorization) -m str "Bearer {{flood}}"
  http-request deny deny_status 429 if flood { sc_http_req_rate(0) gt 1 }
  default_backend be
backend be
  server up {{upstream}}
`

// startExternal runs an external server the throughput scenario compares
// fairgate with (nginx or HAProxy) on one core, as every server of the
// scenario: in the foreground as one process, with its config from the
// template conf (nginxConf, haproxyConf) in a temporary directory. It
// waits until the server accepts connections. A server that is not
// installed is skipped (skipReason).
func startExternal(ctx context.Context, name, conf, upstream string, h2 *h2Listen) (*child, error) {
	dir, err := os.MkdirTemp("", "fairgate-bench-"+name)
	if err != nil {
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(dir, "tmp"), 0o700); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	listen := ln.Addr().String()
	ln.Close()
	// Over HTTP/2 (nginx only): h2c with prior knowledge, or TLS with ALPN.
	// An HTTP/2 connection is closed after keepalive_requests (1000 by
	// default) requests, and h2load does not open another: no limit.
	listenOpts, tlsConf, scheme := "", "", "http://"
	switch {
	case h2.tls():
		listenOpts, scheme = " ssl http2", "https://"
		tlsConf = "\n    keepalive_requests 1000000000;\n    ssl_certificate " + h2.cert + ";\n    ssl_certificate_key " + h2.key + ";"
	case h2 != nil:
		listenOpts, tlsConf = " http2", "\n    keepalive_requests 1000000000;"
	}
	conf = strings.NewReplacer("{{dir}}", dir, "{{flood}}", floodKey, "{{listen}}", listen,
		"{{listenopts}}", listenOpts, "{{tls}}", tlsConf,
		"{{upstream}}", strings.TrimPrefix(upstream, "http://")).Replace(conf)
	file := filepath.Join(dir, name+".conf")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	args := []string{"-f", file, "-db"}
	if name == "nginx" {
		args = []string{"-p", dir, "-c", file, "-g", "daemon off; master_process off;"}
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd, url: scheme + listen, dir: dir}
	for range 100 {
		if conn, err := net.Dial("tcp", listen); err == nil {
			conn.Close()
			return c, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.stop()
	return nil, fmt.Errorf("bench: %s did not start listening", name)
}
