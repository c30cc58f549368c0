package proxyproto

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// ErrBadHeader is the error a connection fails with when it does not
// start with a valid PROXY header.
var ErrBadHeader = errors.New("proxyproto: no valid PROXY protocol header")

// v2sig is the first 12 bytes of a version 2 header.
var v2sig = []byte("\r\n\r\n\x00\r\nQUIT\n")

// maxV1 is a v1 header's longest line, CRLF included (the spec's 107).
const maxV1 = 107

// Listener wraps a net.Listener whose peers send a PROXY header first.
type Listener struct {
	net.Listener
	// HeaderTimeout bounds reading the header. Zero means 5s.
	HeaderTimeout time.Duration
	// Allow, when set, says which peers may send a header: a connection
	// from any other is refused (closed at its first Read), since a
	// header is a claim of who the client is that only the load
	// balancer may make. Nil allows every peer.
	Allow func(peer net.Addr) bool
}

// Accept returns the next connection, its header not yet read.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	pc := &Conn{Conn: c, timeout: cmpOr(l.HeaderTimeout, 5*time.Second)}
	if l.Allow != nil && !l.Allow(c.RemoteAddr()) {
		pc.refused = true
	}
	return pc, nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Conn is a connection whose PROXY header is read before its first byte
// of payload.
type Conn struct {
	net.Conn
	timeout time.Duration
	refused bool // the peer may not send a header: the connection fails
	once    sync.Once
	r       *bufio.Reader
	src     net.Addr // nil: LOCAL or UNKNOWN, the peer stands
	err     error
}

// header reads the PROXY header once.
func (c *Conn) header() {
	c.once.Do(func() {
		if c.refused {
			c.err = fmt.Errorf("%w: from %v, which may not send one", ErrBadHeader, c.Conn.RemoteAddr())
			c.Conn.Close()
			return
		}
		c.Conn.SetReadDeadline(time.Now().Add(c.timeout))
		// 16 bytes of v2 fixed header plus at most 216 of addresses and
		// TLVs are read through this buffer; a larger TLV block is read
		// past in pieces.
		c.r = bufio.NewReaderSize(c.Conn, 256)
		c.src, c.err = Read(c.r)
		c.Conn.SetReadDeadline(time.Time{})
		if c.err != nil {
			c.Conn.Close()
		}
	})
}

// Read reads payload, after the header.
func (c *Conn) Read(p []byte) (int, error) {
	c.header()
	if c.err != nil {
		return 0, c.err
	}
	return c.r.Read(p)
}

// NetConn is the connection under c.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// RemoteAddr is the client's address from the header; the peer's for a
// LOCAL (health check) or UNKNOWN header, and for a connection whose
// header is bad (whose Read fails).
func (c *Conn) RemoteAddr() net.Addr {
	c.header()
	if c.src != nil {
		return c.src
	}
	return c.Conn.RemoteAddr()
}

// Read reads one PROXY header, v1 or v2, from r and returns the source
// address it gives: nil for v1 UNKNOWN and v2 LOCAL (or a family other
// than TCP over IPv4 or IPv6), where the connection's peer is the client.
// Every malformed header is ErrBadHeader, wrapped with what was wrong.
func Read(r *bufio.Reader) (net.Addr, error) {
	first, err := r.Peek(1)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadHeader, err)
	}
	switch first[0] {
	case 'P':
		return readV1(r)
	case '\r':
		return readV2(r)
	}
	return nil, ErrBadHeader
}

// readV1 reads "PROXY TCP4|TCP6|UNKNOWN src dst sport dport\r\n".
func readV1(r *bufio.Reader) (net.Addr, error) {
	var line []byte
	for len(line) < maxV1 {
		b, err := r.ReadByte()
		if err != nil {
			return nil, fmt.Errorf("%w: v1: %w", ErrBadHeader, err)
		}
		line = append(line, b)
		if b == '\n' {
			break
		}
	}
	if !bytes.HasSuffix(line, []byte("\r\n")) {
		return nil, fmt.Errorf("%w: v1: no CRLF within %d bytes", ErrBadHeader, maxV1)
	}
	f := bytes.Split(line[:len(line)-2], []byte(" "))
	if len(f) < 2 || string(f[0]) != "PROXY" {
		return nil, fmt.Errorf("%w: v1: not a PROXY line", ErrBadHeader)
	}
	proto := string(f[1])
	if proto == "UNKNOWN" {
		return nil, nil
	}
	if (proto != "TCP4" && proto != "TCP6") || len(f) != 6 {
		return nil, fmt.Errorf("%w: v1: %q", ErrBadHeader, line)
	}
	src, err1 := netip.ParseAddr(string(f[2]))
	dst, err2 := netip.ParseAddr(string(f[3]))
	sport, err3 := parsePort(f[4])
	_, err4 := parsePort(f[5])
	if err := errors.Join(err1, err2, err3, err4); err != nil {
		return nil, fmt.Errorf("%w: v1: %w", ErrBadHeader, err)
	}
	if src.Is4() != (proto == "TCP4") || dst.Is4() != src.Is4() || src.Zone() != "" || dst.Zone() != "" {
		return nil, fmt.Errorf("%w: v1: addresses are not %s", ErrBadHeader, proto)
	}
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, sport)), nil
}

// parsePort parses a decimal port without a sign or leading zeros.
func parsePort(b []byte) (uint16, error) {
	if len(b) == 0 || len(b) > 5 || (b[0] == '0' && len(b) > 1) {
		return 0, fmt.Errorf("port %q", b)
	}
	n, err := strconv.ParseUint(string(b), 10, 16)
	if err != nil {
		return 0, fmt.Errorf("port %q", b)
	}
	return uint16(n), nil
}

// readV2 reads the binary header: signature, version and command, family
// and transport, length, then the addresses and TLVs.
func readV2(r *bufio.Reader) (net.Addr, error) {
	var fixed [16]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return nil, fmt.Errorf("%w: v2: %w", ErrBadHeader, err)
	}
	if !bytes.Equal(fixed[:12], v2sig) {
		return nil, fmt.Errorf("%w: v2: bad signature", ErrBadHeader)
	}
	if fixed[12]>>4 != 2 {
		return nil, fmt.Errorf("%w: v2: version %d", ErrBadHeader, fixed[12]>>4)
	}
	cmd, fam := fixed[12]&0xf, fixed[13]
	n := int(binary.BigEndian.Uint16(fixed[14:16]))
	var addrs [36]byte
	var need int
	switch fam {
	case 0x11: // TCP over IPv4
		need = 12
	case 0x21: // TCP over IPv6
		need = 36
	case 0x00, 0x12, 0x22, 0x31, 0x32: // UNSPEC; UDP; unix sockets: the peer stands
	default:
		return nil, fmt.Errorf("%w: v2: family and protocol %#x", ErrBadHeader, fam)
	}
	if cmd > 1 {
		return nil, fmt.Errorf("%w: v2: command %d", ErrBadHeader, cmd)
	}
	if n < need {
		return nil, fmt.Errorf("%w: v2: %d bytes of addresses, want %d", ErrBadHeader, n, need)
	}
	if _, err := io.ReadFull(r, addrs[:need]); err != nil {
		return nil, fmt.Errorf("%w: v2: %w", ErrBadHeader, err)
	}
	if _, err := r.Discard(n - need); err != nil { // TLVs, and other families' addresses
		return nil, fmt.Errorf("%w: v2: %w", ErrBadHeader, err)
	}
	if cmd == 0 || need == 0 { // LOCAL, or not TCP over IP: the peer stands
		return nil, nil
	}
	var src netip.Addr
	var port uint16
	if fam == 0x11 {
		src = netip.AddrFrom4([4]byte(addrs[0:4]))
		port = binary.BigEndian.Uint16(addrs[8:10])
	} else {
		src = netip.AddrFrom16([16]byte(addrs[0:16]))
		port = binary.BigEndian.Uint16(addrs[32:34])
	}
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(src.Unmap(), port)), nil
}
