package proxyproto

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func v2(cmd, fam byte, addrs []byte, tlv int) []byte {
	b := append([]byte{}, v2sig...)
	b = append(b, 0x20|cmd, fam)
	b = binary.BigEndian.AppendUint16(b, uint16(len(addrs)+tlv))
	b = append(b, addrs...)
	return append(b, make([]byte, tlv)...)
}

func TestRead(t *testing.T) {
	v4 := []byte{203, 0, 113, 7, 10, 0, 0, 1, 0x30, 0x39, 0, 80}
	v6 := make([]byte, 36)
	copy(v6, net.ParseIP("2001:db8::9"))
	copy(v6[16:], net.ParseIP("2001:db8::1"))
	binary.BigEndian.PutUint16(v6[32:], 443)
	binary.BigEndian.PutUint16(v6[34:], 8080)
	mapped := make([]byte, 36)
	copy(mapped, net.ParseIP("203.0.113.7").To16())
	copy(mapped[16:], net.ParseIP("10.0.0.1").To16())
	binary.BigEndian.PutUint16(mapped[32:], 443)
	for _, tc := range []struct {
		name, in, want string // want "" means nil (the peer stands), "bad" an error
	}{
		{"v1 tcp4", "PROXY TCP4 198.51.100.22 10.0.0.1 35646 80\r\nGET", "198.51.100.22:35646"},
		{"v1 tcp6", "PROXY TCP6 2001:db8::7 2001:db8::1 1000 443\r\nGET", "[2001:db8::7]:1000"},
		{"v1 unknown", "PROXY UNKNOWN\r\nGET", ""},
		{"v1 unknown with addresses", "PROXY UNKNOWN ffff::1 ffff::2 1 2\r\nGET", ""},
		{"v1 family mismatch", "PROXY TCP4 2001:db8::7 10.0.0.1 1 2\r\n", "bad"},
		{"v1 leading zero port", "PROXY TCP4 1.2.3.4 10.0.0.1 080 2\r\n", "bad"},
		{"v1 port too big", "PROXY TCP4 1.2.3.4 10.0.0.1 65536 2\r\n", "bad"},
		{"v1 no CRLF", "PROXY TCP4 1.2.3.4 10.0.0.1 1 2\n", "bad"},
		{"v1 too long", "PROXY TCP4 " + strings.Repeat("1", 120) + "\r\n", "bad"},
		{"v1 missing fields", "PROXY TCP4 1.2.3.4\r\n", "bad"},
		{"plain HTTP", "GET / HTTP/1.1\r\n\r\n", "bad"},
		{"empty", "", "bad"},
		{"v2 tcp4", string(v2(1, 0x11, v4, 0)) + "GET", "203.0.113.7:12345"},
		{"v2 tcp4 with TLVs", string(v2(1, 0x11, v4, 300)) + "GET", "203.0.113.7:12345"},
		{"v2 tcp6", string(v2(1, 0x21, v6, 5)) + "GET", "[2001:db8::9]:443"},
		{"v2 local", string(v2(0, 0x00, nil, 0)) + "GET", ""},
		{"v2 unix family", string(v2(1, 0x31, make([]byte, 216), 0)) + "GET", ""},
		{"v2 unknown family", string(v2(1, 0x41, v4, 0)) + "GET", "bad"},
		{"v2 tcp6 mapped v4", string(v2(1, 0x21, mapped, 0)) + "GET", "203.0.113.7:443"},
		{"v2 short addresses", string(v2(1, 0x11, v4[:8], 0)), "bad"},
		{"v2 truncated", string(v2(1, 0x11, v4, 0))[:20], "bad"},
		{"v2 bad version", strings.Replace(string(v2(1, 0x11, v4, 0)), "\x21", "\x31", 1), "bad"},
		{"v2 bad command", string(v2(2, 0x11, v4, 0)), "bad"},
		{"v2 bad signature", "\r\n\r\n\x00\r\nQUIX\n\x21\x11\x00\x0c" + string(v4), "bad"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := bufio.NewReaderSize(strings.NewReader(tc.in), 256)
			got, err := Read(r)
			switch {
			case tc.want == "bad":
				if !errors.Is(err, ErrBadHeader) {
					t.Fatalf("Read = %v, %v; want ErrBadHeader", got, err)
				}
				return
			case err != nil:
				t.Fatalf("Read: %v", err)
			case tc.want == "" && got != nil, tc.want != "" && (got == nil || got.String() != tc.want):
				t.Fatalf("Read = %v, want %q", got, tc.want)
			}
			if rest, _ := io.ReadAll(r); string(rest) != "GET" {
				t.Fatalf("payload after the header = %q, want GET", rest)
			}
		})
	}
}

// TestListener: the header is read on the connection, not in Accept, and
// a connection without one fails instead of being served.
func TestListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pl := &Listener{Listener: ln, HeaderTimeout: 5 * time.Second}
	defer pl.Close()
	silent, err := net.Dial("tcp", ln.Addr().String()) // sends nothing
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	good, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	good.Write([]byte("PROXY TCP4 198.51.100.22 10.0.0.1 35646 80\r\nhello"))
	bad, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	bad.Write([]byte("GET / HTTP/1.1\r\n\r\n"))

	var conns []net.Conn
	for range 3 { // Accept does not wait for the silent one's header
		c, err := pl.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	results := make(chan string, 2)
	for _, c := range conns[1:] {
		go func() {
			buf := make([]byte, 5)
			_, err := io.ReadFull(c, buf)
			if err != nil {
				results <- "error"
				return
			}
			results <- c.RemoteAddr().String() + " " + string(buf)
		}()
	}
	got := map[string]bool{<-results: true, <-results: true}
	if !got["198.51.100.22:35646 hello"] || !got["error"] {
		t.Fatalf("got %v, want the good connection's client and payload, and the bad one failing", got)
	}
}

// FuzzRead: no input panics, and a header that reads well leaves the
// reader at its end.
func FuzzRead(f *testing.F) {
	f.Add([]byte("PROXY TCP4 198.51.100.22 10.0.0.1 35646 80\r\n"))
	f.Add(v2(1, 0x11, []byte{1, 2, 3, 4, 5, 6, 7, 8, 0, 1, 0, 2}, 3))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReaderSize(strings.NewReader(string(in)), 256)
		if _, err := Read(r); err != nil && !errors.Is(err, ErrBadHeader) {
			t.Fatalf("error %v is not ErrBadHeader", err)
		}
	})
}

// TestListenerAllow: a peer Allow refuses gets no hearing, header or not.
func TestListenerAllow(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pl := &Listener{Listener: ln, Allow: func(net.Addr) bool { return false }}
	defer pl.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("PROXY TCP4 198.51.100.22 10.0.0.1 35646 80\r\nhello"))
	sc, err := pl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	if _, err := sc.Read(make([]byte, 5)); !errors.Is(err, ErrBadHeader) {
		t.Fatalf("Read from a refused peer: %v, want ErrBadHeader", err)
	}
	if got := sc.RemoteAddr().String(); got == "198.51.100.22:35646" {
		t.Fatal("a refused peer's header was believed")
	}
}
