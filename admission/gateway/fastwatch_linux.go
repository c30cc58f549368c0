//go:build linux

package gateway

import (
	"errors"
	"net"
	"os"
	"syscall"
	"time"
)

// connPoller is the goneWatcher's epoll set: every client connection,
// edge-triggered, for EPOLLRDHUP (the peer closed its side), hang-ups and
// errors only, each under its connection's ID; and a wake pipe under ID 0.
type connPoller struct {
	// epfd is the epoll instance; file and raw are it in Go's poller.
	epfd int
	file *os.File
	raw  syscall.RawConn
	// wake is a pipe in the epoll set under ID 0 (no connection's):
	// wakeUp writes to it, which ends the wait on the epoll fd.
	wake [2]int
	evs  [64]syscall.EpollEvent
}

func newConnPoller() (*connPoller, error) {
	fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	// Non-blocking and in Go's own poller, so that the goroutine waits
	// for the epoll fd to turn readable as for a socket, holding no thread
	// in epoll_wait: with one P (GOMAXPROCS=1), a thread back from a
	// blocking wait had to win the P back, and re-entering the wait held
	// the P until the runtime took it back, up to milliseconds in which
	// nothing was served.
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	p := &connPoller{epfd: fd, file: os.NewFile(uintptr(fd), "fairgate-gone-watcher")}
	if p.raw, err = p.file.SyscallConn(); err != nil {
		p.file.Close()
		return nil, err
	}
	if err := syscall.Pipe2(p.wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		p.file.Close()
		return nil, err
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN} // ID 0
	if err := syscall.EpollCtl(fd, syscall.EPOLL_CTL_ADD, p.wake[0], &ev); err != nil {
		p.release()
		return nil, err
	}
	return p, nil
}

func (p *connPoller) wakeUp() { syscall.Write(p.wake[1], []byte{0}) }

// release closes the poller's descriptors.
func (p *connPoller) release() {
	p.file.Close()
	syscall.Close(p.wake[0])
	syscall.Close(p.wake[1])
}

// epollET is syscall.EPOLLET as the uint32 that EpollEvent.Events is
// (syscall spells it as a negative int).
const epollET = 1 << 31

// add puts tc in the set under id (never 0). The caller keeps the poller
// from being released under it.
func (p *connPoller) add(tc *net.TCPConn, id uint64) bool {
	rc, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	var fd int
	if rc.Control(func(f uintptr) { fd = int(f) }) != nil {
		return false
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | syscall.EPOLLHUP | syscall.EPOLLERR | epollET,
		Fd: int32(uint32(id)), Pad: int32(uint32(id >> 32))}
	return syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, fd, &ev) == nil
}

// wait waits until until, or for connections to go, whose IDs it puts in
// ids; woken says wakeUp was called. A connection leaves the set with its
// close.
func (p *connPoller) wait(until time.Time, ids []uint64) (n int, woken bool, err error) {
	p.file.SetReadDeadline(until)
	var werr error
	evs := p.evs[:min(len(ids), len(p.evs))]
	err = p.raw.Read(func(fd uintptr) bool {
		n, werr = syscall.EpollWait(int(fd), evs, 0)
		if werr == syscall.EINTR {
			n, werr = 0, nil
		}
		return n > 0 || werr != nil
	})
	if errors.Is(err, os.ErrDeadlineExceeded) {
		err = nil
	}
	if err == nil {
		err = werr
	}
	k := 0
	for _, ev := range evs[:max(n, 0)] {
		id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
		if id == 0 { // the wake pipe
			woken = true
			continue
		}
		ids[k] = id
		k++
	}
	return k, woken, err
}
