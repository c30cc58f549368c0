package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

const answerLen = 1000

// target is a TCP server that answers each line it reads with answerLen
// bytes, and counts the connections it accepted.
type target struct {
	ln       net.Listener
	accepted atomic.Int32
	wg       sync.WaitGroup
}

func startTarget(t *testing.T) *target {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tg := &target{ln: ln}
	answer := make([]byte, answerLen)
	for i := range answer {
		answer[i] = 'x'
	}
	tg.wg.Add(1)
	go func() {
		defer tg.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tg.accepted.Add(1)
			tg.wg.Add(1)
			go func() {
				defer tg.wg.Done()
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					if _, err := br.ReadString('\n'); err != nil {
						return
					}
					if _, err := c.Write(answer); err != nil {
						return
					}
				}
			}()
		}
	}()
	return tg
}

func (tg *target) close() {
	tg.ln.Close()
	tg.wg.Wait()
}

// ask dials the proxy, sends one line and reads up to answerLen bytes
// within the deadline. It returns what it read and the error that ended
// the read (nil when the whole answer came).
func ask(t *testing.T, addr string, deadline time.Duration) (net.Conn, int, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(deadline))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return c, 0, err
	}
	buf := make([]byte, answerLen)
	n, err := io.ReadFull(c, buf)
	return c, n, err
}

func TestModes(t *testing.T) {
	tg := startTarget(t)
	defer tg.close()
	p, err := New(tg.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	t.Run("pass-through", func(t *testing.T) {
		c, n, err := ask(t, p.Addr(), 5*time.Second)
		defer c.Close()
		if err != nil || n != answerLen {
			t.Fatalf("read %d bytes, err %v; want %d, nil", n, err, answerLen)
		}
	})
	t.Run("latency", func(t *testing.T) {
		p.Set(Fault{Mode: Latency, Latency: 150 * time.Millisecond})
		defer p.Set(Fault{})
		start := time.Now()
		c, n, err := ask(t, p.Addr(), 5*time.Second)
		defer c.Close()
		if err != nil || n != answerLen {
			t.Fatalf("read %d bytes, err %v", n, err)
		}
		if took := time.Since(start); took < 150*time.Millisecond {
			t.Fatalf("answer after %v, want at least the 150ms latency", took)
		}
	})
	t.Run("reset", func(t *testing.T) {
		p.Set(Fault{Mode: Reset, ResetAfter: 100})
		defer p.Set(Fault{})
		c, n, err := ask(t, p.Addr(), 5*time.Second)
		defer c.Close()
		if n != 100 {
			t.Fatalf("read %d bytes before the reset, want 100", n)
		}
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("err %v, want a connection reset", err)
		}
	})
	t.Run("drop", func(t *testing.T) {
		open, _, err := ask(t, p.Addr(), 5*time.Second) // opened before the drop
		defer open.Close()
		if err != nil {
			t.Fatal(err)
		}
		before := tg.accepted.Load()
		p.Set(Fault{Mode: Drop})
		defer p.Set(Fault{})
		c, n, err := ask(t, p.Addr(), 5*time.Second)
		defer c.Close()
		if n != 0 || err == nil || isTimeout(err) {
			t.Fatalf("read %d bytes, err %v; want the connection closed at once", n, err)
		}
		if tg.accepted.Load() != before {
			t.Fatal("a dropped connection reached the target")
		}
		// The connection opened before Drop was closed too.
		if _, err := open.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Fatalf("connection open before Drop: read err %v, want closed", err)
		}
	})
	t.Run("black hole", func(t *testing.T) {
		before := tg.accepted.Load()
		p.Set(Fault{Mode: BlackHole})
		defer p.Set(Fault{})
		c, n, err := ask(t, p.Addr(), 200*time.Millisecond)
		defer c.Close()
		if n != 0 || !isTimeout(err) {
			t.Fatalf("read %d bytes, err %v; want nothing until the deadline", n, err)
		}
		if tg.accepted.Load() != before {
			t.Fatal("a black-holed connection reached the target")
		}
	})
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestCloseStopsEverything leaves connections open in every mode (one
// waiting out a long latency, one in a black hole, one idle after an
// answer), closes the proxy and checks the goroutine count is back to where
// it was before the proxy started.
func TestCloseStopsEverything(t *testing.T) {
	tg := startTarget(t)
	defer tg.close()
	base := runtime.NumGoroutine()

	p, err := New(tg.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	var clients []net.Conn
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	dial := func() net.Conn {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
		return c
	}
	idle := dial()
	io.WriteString(idle, "ping\n")
	if _, err := io.ReadFull(idle, make([]byte, answerLen)); err != nil {
		t.Fatal(err)
	}
	p.Set(Fault{Mode: Latency, Latency: time.Hour})
	io.WriteString(dial(), "ping\n")
	waitConns(t, p, tg, 2, 2) // accepted under Latency before the next Set
	p.Set(Fault{Mode: BlackHole})
	io.WriteString(dial(), "ping\n")
	waitConns(t, p, tg, 3, 2)
	if during := runtime.NumGoroutine(); during <= base {
		t.Fatalf("%d goroutines with 3 connections open, %d before: the check below proves nothing", during, base)
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Active != 0 {
		t.Fatalf("after Close: %+v", st)
	}
	// The target's own per-connection goroutines end when it sees the
	// proxy's side close; wait for them, bounded.
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines after Close, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("the proxy still accepts after Close")
	}
}

// waitConns waits until the proxy has accepted proxied connections and the
// target targeted, bounded by five seconds.
func waitConns(t *testing.T, p *Proxy, tg *target, proxied, targeted int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().Accepted < proxied || int(tg.accepted.Load()) < targeted {
		if time.Now().After(deadline) {
			t.Fatalf("proxy stats %+v, target accepted %d; want %d, %d", p.Stats(), tg.accepted.Load(), proxied, targeted)
		}
		time.Sleep(time.Millisecond) // bounded poll of real sockets
	}
}
