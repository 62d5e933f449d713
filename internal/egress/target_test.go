package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseAuthority(t *testing.T) {
	tests := []struct {
		in      string
		def     uint16
		host    string
		port    uint16
		ip      bool
		wantErr string
	}{
		{"example.com:443", 0, "example.com", 443, false, ""},
		{"EXAMPLE.Com:443", 0, "example.com", 443, false, ""},
		{"example.com", 80, "example.com", 80, false, ""},
		{"a_b.example.com:8080", 0, "a_b.example.com", 8080, false, ""},
		{"xn--bcher-kva.example:443", 0, "xn--bcher-kva.example", 443, false, ""},
		{"localhost:443", 0, "localhost", 443, false, ""},
		{"1.2.3.4:443", 0, "1.2.3.4", 443, true, ""},
		{"[2001:db8::1]:443", 0, "2001:db8::1", 443, true, ""},
		{"[2001:DB8:0::1]", 80, "2001:db8::1", 80, true, ""},
		{"[::ffff:127.0.0.1]:443", 0, "127.0.0.1", 443, true, ""},
		{"[::ffff:7f00:1]:443", 0, "127.0.0.1", 443, true, ""},

		{"", 0, "", 0, false, "empty host"},
		{"example.com", 0, "", 0, false, "no port"},
		{"example.com:", 0, "", 0, false, "port is empty"},
		{"example.com:0", 0, "", 0, false, "zero"},
		{"example.com:0443", 0, "", 0, false, "leading zero"},
		{"example.com:65536", 0, "", 0, false, "over 65535"},
		{"example.com:99999999", 0, "", 0, false, "not a number"},
		{"example.com:443x", 0, "", 0, false, "not a number"},
		{"example.com:+443", 0, "", 0, false, "has no place"},
		{"example.com:443:443", 0, "", 0, false, "brackets"},
		{"evil.com\x00.example.com:443", 0, "", 0, false, "NUL"},
		{"evil.com .example.com:443", 0, "", 0, false, "space"},
		{"evil.com\t:443", 0, "", 0, false, "control"},
		{"evil.com\x7f:443", 0, "", 0, false, "control"},
		{"user@example.com:443", 0, "", 0, false, "user information"},
		{"user:pw@example.com:443", 0, "", 0, false, "user information"},
		{"exa%6dple.com:443", 0, "", 0, false, "percent-encoding"},
		{"[fe80::1%25eth0]:443", 0, "", 0, false, "zone"},
		{"[fe80::1%eth0]:443", 0, "", 0, false, "zone"},
		{"bücher.example:443", 0, "", 0, false, "xn--"},
		{"example.com.:443", 0, "", 0, false, "ends with a dot"},
		{"example..com:443", 0, "", 0, false, "empty label"},
		{".example.com:443", 0, "", 0, false, "empty label"},
		{"-a.example.com:443", 0, "", 0, false, "hyphen"},
		{"a-.example.com:443", 0, "", 0, false, "hyphen"},
		{strings.Repeat("a", 64) + ".com:443", 0, "", 0, false, "over 63"},
		{strings.Repeat("a.", 126) + "com:443", 0, "", 0, false, "over 253"},
		{strings.Repeat("a", 300), 80, "", 0, false, "bytes long"},
		{"127.1:443", 0, "", 0, false, "resolvers would read it"},
		{"0x7f.1:443", 0, "", 0, false, "resolvers would read it"},
		{"0x7f000001:443", 0, "", 0, false, "resolvers would read it"},
		{"2130706433:443", 0, "", 0, false, "resolvers would read it"},
		{"017700000001:443", 0, "", 0, false, "resolvers would read it"},
		{"127.000.000.001:443", 0, "", 0, false, "resolvers would read it"},
		{"1.2.3.4.5:443", 0, "", 0, false, "resolvers would read it"},
		{"[1.2.3.4]:443", 0, "", 0, false, "only for IPv6"},
		{"[::1]x:443", 0, "", 0, false, "not a port"},
		{"[::1:443", 0, "", 0, false, "unclosed"},
		{"::1:443", 0, "", 0, false, "brackets"},
		{"a]b:443", 0, "", 0, false, "misplaced"},
		{"example.com/x:443", 0, "", 0, false, "has no place"},
		{"example.com\\@evil:443", 0, "", 0, false, "has no place"},
		{"example.com#:443", 0, "", 0, false, "has no place"},
		{"xn--zz.example:443", 0, "", 0, false, "internationalised"},
	}
	for _, tt := range tests {
		got, err := parseAuthority(tt.in, tt.def)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseAuthority(%q) = %+v, %v; want an error with %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got.host != tt.host || got.port != tt.port || got.ip.IsValid() != tt.ip {
			t.Errorf("parseAuthority(%q) = %+v, %v; want %s port %d", tt.in, got, err, tt.host, tt.port)
		}
	}
}

func TestParseAbsoluteURI(t *testing.T) {
	tests := []struct {
		method, in, host string
		port             uint16
		origin, wantErr  string
	}{
		{"GET", "http://example.com/a/b?c=d", "example.com", 80, "/a/b?c=d", ""},
		{"GET", "HTTP://Example.com:8080", "example.com", 8080, "/", ""},
		{"GET", "http://example.com?x", "example.com", 80, "/?x", ""},
		{"OPTIONS", "http://example.com", "example.com", 80, "*", ""},
		{"GET", "http://[2001:db8::1]:81/%2e%2e/", "2001:db8::1", 81, "/%2e%2e/", ""},
		{"GET", "/a", "", 0, "", "this is a proxy"},
		{"GET", "*", "", 0, "", "this is a proxy"},
		{"GET", "example.com:80", "", 0, "", "not an absolute"},
		{"GET", "https://example.com/", "", 0, "", "use CONNECT"},
		{"GET", "ftp://example.com/", "", 0, "", "not forwarded"},
		{"GET", "http://example.com/#frag", "", 0, "", "fragment"},
		{"GET", "http://user@example.com/", "", 0, "", "user information"},
		{"GET", "http://example.com@evil.com/", "", 0, "", "user information"},
		{"GET", "http://evil.com\\@example.com/", "", 0, "", "has no place"},
		{"GET", "http:///path", "", 0, "", "empty host"},
	}
	for _, tt := range tests {
		got, origin, err := parseAbsoluteURI(tt.method, tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseAbsoluteURI(%q) = %+v, %v; want an error with %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got.host != tt.host || got.port != tt.port || origin != tt.origin {
			t.Errorf("parseAbsoluteURI(%q) = %+v %q, %v", tt.in, got, origin, err)
		}
	}
}

func TestHostHeader(t *testing.T) {
	for _, tt := range []struct {
		t    target
		want string
	}{
		{target{host: "example.com", port: 80}, "example.com"},
		{target{host: "example.com", port: 8080}, "example.com:8080"},
		{target{host: "2001:db8::1", ip: netip.MustParseAddr("2001:db8::1"), port: 80}, "[2001:db8::1]"},
		{target{host: "2001:db8::1", ip: netip.MustParseAddr("2001:db8::1"), port: 81}, "[2001:db8::1]:81"},
	} {
		if got := tt.t.hostHeader(80); got != tt.want {
			t.Errorf("hostHeader(%+v) = %q, want %q", tt.t, got, tt.want)
		}
	}
}

func TestSNIMismatch(t *testing.T) {
	name := target{host: "example.com", port: 443}
	ip := target{host: "192.0.2.1", ip: netip.MustParseAddr("192.0.2.1"), port: 443}
	for _, tt := range []struct {
		t    target
		sni  string
		want string // "" when it fits
	}{
		{name, "example.com", ""},
		{name, "EXAMPLE.com", ""},
		{name, "other.com", "asks for"},
		{name, "example.com.", "malformed"},
		{name, "example.com\x00.other.com", "malformed"},
		{name, "", "names no server"},
		{ip, "", ""},
		{ip, "192.0.2.1", ""},
		{ip, "example.com", "asks for"},
	} {
		if got := sniMismatch(tt.t, tt.sni); (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("sniMismatch(%s, %q) = %q, want %q", tt.t.host, tt.sni, got, tt.want)
		}
	}
}
