package egress

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
)

// captureHello returns the ClientHello record(s) crypto/tls sends with cfg.
func captureHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	client, server := net.Pipe()
	defer server.Close()
	go func() {
		_ = tls.Client(client, cfg).Handshake()
		client.Close()
	}()
	raw, _, err := readClientHello(server)
	if err != nil {
		t.Fatalf("reading crypto/tls's ClientHello: %v", err)
	}
	return raw
}

func u16(n int) []byte { return []byte{byte(n >> 8), byte(n)} }

// helloBody is a minimal ClientHello body with the given extensions block (nil: none).
func helloBody(exts []byte) []byte {
	b := []byte{3, 3}
	b = append(b, make([]byte, 32)...)
	b = append(b, 0)                // session id
	b = append(b, 0, 2, 0x13, 0x01) // one cipher suite
	b = append(b, 1, 0)             // null compression
	if exts != nil {
		b = append(b, u16(len(exts))...)
		b = append(b, exts...)
	}
	return b
}

func handshake(body []byte) []byte {
	return append([]byte{typeClientHello, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
}

// records cuts a handshake message into records of at most n bytes.
func records(msg []byte, n int) []byte {
	var out []byte
	for len(msg) > 0 {
		k := min(n, len(msg))
		out = append(out, recordHandshake, 3, 1)
		out = append(out, u16(k)...)
		out = append(out, msg[:k]...)
		msg = msg[k:]
	}
	return out
}

func ext(typ int, data []byte) []byte {
	return append(append(u16(typ), u16(len(data))...), data...)
}

// sni is a server_name extension's data listing names, each with its type.
func sni(entries ...[]byte) []byte {
	var list []byte
	for _, e := range entries {
		list = append(list, e[0])
		list = append(list, u16(len(e)-1)...)
		list = append(list, e[1:]...)
	}
	return append(u16(len(list)), list...)
}

func hostName(s string) []byte { return append([]byte{serverNameHost}, s...) }

func TestReadClientHelloFromCryptoTLS(t *testing.T) {
	tests := []struct {
		name string
		cfg  *tls.Config
		want string
	}{
		{"TLS 1.3", &tls.Config{ServerName: "allowed.test"}, "allowed.test"},
		{"TLS 1.2", &tls.Config{ServerName: "allowed.test", MaxVersion: tls.VersionTLS12}, "allowed.test"},
		{"ALPN and upper case", &tls.Config{ServerName: "Allowed.TEST", NextProtos: []string{"h2", "http/1.1"}}, "allowed.test"},
		{"no server name", &tls.Config{InsecureSkipVerify: true}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := captureHello(t, tt.cfg)
			got, h, err := readClientHello(bytes.NewReader(raw))
			if err != nil || !bytes.Equal(got, raw) || strings.ToLower(h.serverName) != tt.want {
				t.Fatalf("= %q, %v (raw kept: %v)", h.serverName, err, bytes.Equal(got, raw))
			}
			// The same hello cut into small records reads the same.
			msg := raw[recordHeaderLen:]
			frag := records(msg, 7)
			got, h2, err := readClientHello(bytes.NewReader(frag))
			if err != nil || h2 != h || !bytes.Equal(got, frag) {
				t.Fatalf("fragmented: %+v, %v", h2, err)
			}
		})
	}
}

func TestReadClientHelloRefuses(t *testing.T) {
	good := handshake(helloBody(ext(extServerName, sni(hostName("a.test")))))
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"not TLS", []byte("GET / HTTP/1.1\r\n\r\n"), "did not start with a TLS ClientHello"},
		{"SSLv2-style", []byte{0x80, 0x2e, 0x01, 0x03, 0x01}, "did not start with a TLS ClientHello"},
		{"record version 2", append([]byte{22, 2, 0, 0, 4}, 1, 0, 0, 0), "did not start"},
		{"empty record", []byte{22, 3, 1, 0, 0}, "record of 0 bytes"},
		{"record over 16KiB", append([]byte{22, 3, 1, 0x40, 0x01}, make([]byte, 0x4001)...), "record of 16385 bytes"},
		{"truncated", records(good, 1000)[:20], "unexpected EOF"},
		{"server hello", records(append([]byte{2}, good[1:]...), 1000), "not a ClientHello"},
		{"another record type inside", append(records(good[:10], 10), 23, 3, 3, 0, 1, 0), "not a handshake record"},
		{"bytes after the hello", records(append(good, 0), 1000), "bytes after the ClientHello"},
		{"hello too big", records(append([]byte{1, 2, 0, 0}, make([]byte, 4)...), 100), "over"},
		{"hello without cipher suites", records(handshake(append(make([]byte, 35), 0, 0, 1, 0)), 1000), "malformed"},
		{"extensions overrun", records(handshake(append(helloBody(nil), 0, 9, 0, 0, 0, 1)), 1000), "malformed"},
		{"trailing bytes after extensions", records(handshake(append(helloBody(ext(5, nil)), 0)), 1000), "malformed"},
		{"two server_name extensions", records(handshake(helloBody(append(ext(0, sni(hostName("a.test"))), ext(0, sni(hostName("b.test")))...))), 1000), "two extensions of type 0"},
		{"two names", records(handshake(helloBody(ext(0, sni(hostName("a.test"), hostName("b.test"))))), 1000), "two server names"},
		{"unknown name type", records(handshake(helloBody(ext(0, sni(append([]byte{1}, "a.test"...))))), 1000), "unknown type 1"},
		{"empty name", records(handshake(helloBody(ext(0, sni(hostName(""))))), 1000), "empty server name"},
		{"empty name list", records(handshake(helloBody(ext(0, u16(0)))), 1000), "malformed"},
		{"name list overruns", records(handshake(helloBody(ext(0, append(u16(9), 0, 0, 1, 'a')))), 1000), "malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, h, err := readClientHello(bytes.NewReader(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("= %+v, %v; want an error with %q", h, err, tt.want)
			}
		})
	}
	if _, _, err := readClientHello(bytes.NewReader([]byte("GET /"))); !errors.Is(err, errNotTLS) {
		t.Errorf("not TLS: %v", err)
	}
	if _, h, err := readClientHello(bytes.NewReader(records(good, 1000))); err != nil || h.serverName != "a.test" {
		t.Errorf("the well-formed hand-built hello: %+v, %v", h, err)
	}
	if _, h, err := readClientHello(bytes.NewReader(records(handshake(helloBody(nil)), 1000))); err != nil || h.serverName != "" {
		t.Errorf("a hello without extensions: %+v, %v", h, err)
	}
	if _, _, err := readClientHello(bytes.NewReader(nil)); !errors.Is(err, io.EOF) {
		t.Errorf("empty input: %v", err)
	}
}
