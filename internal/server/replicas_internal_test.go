package server

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzCheckHop: a hop header from anywhere never panics, and authenticates only when it
// is the signature of the request it came with, under the cluster's key.
func FuzzCheckHop(f *testing.F) {
	s := &Server{cluster: &cluster{id: "r1", key: []byte(strings.Repeat("k", 32))}}
	signed := httptest.NewRequest("GET", "http://live-u.localhost/api/info?x=1", nil)
	s.cluster.sign(signed, "u1")
	good := signed.Header.Get(HopHeader)
	f.Add(good, "/api/info?x=1")
	f.Add(good, "/api/info?x=2")
	f.Add(strings.Replace(good, " u1 ", " u2 ", 1), "/api/info?x=1")
	f.Add(good[:len(good)-4]+"AAAA", "/api/info?x=1")
	f.Add("v1 r1 0 u1 AAAA", "/")
	f.Add("v1 r1 99999999999999999999 - x", "/")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, v, uri string) {
		if !strings.HasPrefix(uri, "/") {
			uri = "/" + uri
		}
		defer func() {
			if recover() != nil {
				t.Skip() // httptest's own parse of a malformed URI
			}
		}()
		r := httptest.NewRequest("GET", "http://live-u.localhost"+uri, nil)
		h, err := s.checkHop(r, []string{v})
		if err != nil {
			return
		}
		// What this replica signs for the signed request at the hop's own time: the
		// seed was signed in another process (fuzz workers), perhaps a second earlier.
		f := strings.Split(v, " ")
		if r.URL.RequestURI() != signed.URL.RequestURI() || len(f) != 5 ||
			v != strings.Join([]string{"v1", "r1", f[2], "u1", s.cluster.mac("r1", f[2], "u1", signed)}, " ") {
			t.Fatalf("hop %q on %s authenticated as %+v", v, uri, h)
		}
	})
}

// A hop signed by this cluster authenticates its own request and no other.
func TestHopSignature(t *testing.T) {
	s := &Server{cluster: &cluster{id: "r1", key: []byte(strings.Repeat("k", 32))}}
	r := httptest.NewRequest("GET", "http://live-u.localhost/api/info", nil)
	s.cluster.sign(r, "u1")
	if h, err := s.checkHop(r, r.Header.Values(HopHeader)); err != nil || h.user != "u1" || h.from != "r1" {
		t.Fatalf("own hop: %+v, %v", h, err)
	}
	other := httptest.NewRequest("POST", "http://live-u.localhost/api/info", nil)
	if _, err := s.checkHop(other, r.Header.Values(HopHeader)); err == nil {
		t.Error("a hop signed for a GET authenticated a POST")
	}
	elsewhere := &Server{cluster: &cluster{id: "r2", key: []byte(strings.Repeat("x", 32))}}
	if _, err := elsewhere.checkHop(r, r.Header.Values(HopHeader)); err == nil {
		t.Error("a hop signed under another key authenticated")
	}
	alone := &Server{}
	if _, err := alone.checkHop(r, r.Header.Values(HopHeader)); err == nil {
		t.Error("a server that is no replica accepted a hop")
	}
}

// FuzzReadPreamble: a hand-on preamble from anywhere never panics, reads back as it was
// written, and verifies only when it is the one signed for this nonce under this key.
func FuzzReadPreamble(f *testing.F) {
	key, nonce := []byte(strings.Repeat("k", 32)), []byte("0123456789abcdef")
	signed := [][]byte{signedPreamble(key, nonce, true, "192.0.2.1:4711").append(nil), signedPreamble(key, nonce, false, "").append(nil)}
	for _, b := range signed {
		f.Add(b)
	}
	f.Add([]byte("PDKH\x01\x00\x00"))
	f.Add([]byte("PDKH\x01\x02\xff"))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := readPreamble(bytes.NewReader(b))
		if err != nil {
			return
		}
		again := p.append(nil)
		if !bytes.HasPrefix(b, again) {
			t.Fatalf("%q read as %+v, which writes %q", b, p, again)
		}
		if p.verify(key, nonce) == nil && !bytes.Equal(again, signed[0]) && !bytes.Equal(again, signed[1]) {
			t.Fatalf("%q verified", again)
		}
	})
}

// A preamble verifies for its own nonce and key only, and an address that is no
// host:port is not sent.
func TestPreamble(t *testing.T) {
	key, nonce := []byte(strings.Repeat("k", 32)), []byte("0123456789abcdef")
	b := signedPreamble(key, nonce, true, "[2001:db8::1]:443").append(nil)
	p, err := readPreamble(bytes.NewReader(append(b, "GET / HTTP/1.1\r\n"...)))
	if err != nil || !p.secure || p.client != "[2001:db8::1]:443" || p.verify(key, nonce) != nil {
		t.Fatalf("read back: %+v %v", p, err)
	}
	if p.verify(key, []byte("fedcba9876543210")) == nil {
		t.Error("a preamble verified for another connection's nonce")
	}
	if p.verify([]byte(strings.Repeat("x", 32)), nonce) == nil {
		t.Error("a preamble verified under another key")
	}
	p.secure = false
	if p.verify(key, nonce) == nil {
		t.Error("a preamble whose flag was changed verified")
	}
	if got := signedPreamble(key, nonce, false, "@unix"); got.client != "" {
		t.Errorf("client %q sent, want none", got.client)
	}
	for _, bad := range []string{"PDKX\x01\x00\x00", "PDKH\x02\x00\x00", "PDKH\x01\x04\x00", "PDKH\x01\x00\x41", "PDKH\x01\x00\x03abc" + strings.Repeat("m", 32)} {
		if _, err := readPreamble(strings.NewReader(bad + strings.Repeat("\x00", 100))); err == nil {
			t.Errorf("preamble %q read", bad)
		}
	}
}

// relay carries small writes one by one and a bulk transfer whole, by splice once a read
// fills its buffer, and ends at the source's end.
func TestRelay(t *testing.T) {
	pair := func() (net.Conn, net.Conn) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		a, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		b, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close(); b.Close() })
		return a, b
	}
	in, src := pair()
	dst, out := pair()
	done := make(chan error, 1)
	go func() { done <- relay(dst, src) }()
	small := []byte("GET / HTTP/1.1\r\n\r\n")
	in.Write(small)
	got := make([]byte, len(small))
	if _, err := io.ReadFull(out, got); err != nil || !bytes.Equal(got, small) {
		t.Fatalf("small write relayed as %q, %v", got, err)
	}
	bulk := make([]byte, 4<<20)
	rand.Read(bulk)
	go func() { in.Write(bulk); in.(*net.TCPConn).CloseWrite() }()
	all, err := io.ReadAll(io.LimitReader(out, int64(len(bulk))))
	if err != nil || !bytes.Equal(all, bulk) {
		t.Fatalf("bulk relayed: %d bytes of %d, equal %t, %v", len(all), len(bulk), bytes.Equal(all, bulk), err)
	}
	if err := <-done; err != nil {
		t.Fatalf("relay at the source's end: %v", err)
	}
}
