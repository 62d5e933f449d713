package egress

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/policy"
)

// FuzzParseClientHello: whatever a sandbox sends as the start of a tunnel, the ClientHello
// reader never panics, never reads past maxHelloLen, hands back exactly the bytes it read,
// and a server name it accepts for a host is that host.
func FuzzParseClientHello(f *testing.F) {
	for _, cfg := range []*tls.Config{
		{ServerName: "allowed.test"},
		{ServerName: "allowed.test", MaxVersion: tls.VersionTLS12},
		{InsecureSkipVerify: true},
	} {
		raw := captureHello(f, cfg)
		f.Add(raw)
		f.Add(records(raw[recordHeaderLen:], 50))
	}
	f.Add(records(handshake(helloBody(ext(0, sni(hostName("a.test"), hostName("b.test"))))), 1000))
	f.Add(records(handshake(helloBody(ext(0, sni(hostName("a.test\x00.b.test"))))), 1000))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{22, 3, 1, 0x40, 0x00})
	tgt := target{host: "allowed.test", port: 443}
	f.Fuzz(func(t *testing.T, b []byte) {
		raw, h, err := readClientHello(bytes.NewReader(b))
		if len(raw) > maxHelloLen || len(raw) > len(b) || !bytes.Equal(raw, b[:len(raw)]) {
			t.Fatalf("read %d bytes of %d, not a prefix of the input or over the bound", len(raw), len(b))
		}
		if err != nil {
			if h.serverName != "" {
				t.Fatalf("a server name %q with an error %v", h.serverName, err)
			}
			return
		}
		if why := sniMismatch(tgt, h.serverName); why == "" && strings.ToLower(h.serverName) != tgt.host {
			t.Fatalf("server name %q accepted for %s", h.serverName, tgt.host)
		}
	})
}

// FuzzHost: whatever authority, absolute URI or Host header a sandbox sends, what the
// parser accepts has no NUL, '@', '%', space or control byte in its host, a port, a
// canonical form that parses to itself, and is a host the policy can decide (never one
// the policy calls malformed).
func FuzzHost(f *testing.F) {
	for _, s := range []string{
		"example.com:443", "EXAMPLE.com", "[2001:db8::1]:443", "[::ffff:127.0.0.1]:80", "1.2.3.4:443",
		"evil.com\x00.example.com:443", "user@example.com:443", "exa%6dple.com", "[fe80::1%25eth0]:443",
		"127.1:443", "0x7f.1", "example.com.:443", "a..b", "xn--bcher-kva.example:443", "bücher.example",
		"http://example.com/path", "http://user@example.com/", "HTTP://[::1]:8080?x", "a_b.example.com:1",
	} {
		f.Add(s)
	}
	pol, err := policy.Load([]byte("network:\n  default: deny\n  allow: [\"*.example.com\"]\n"), "fuzz.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var got []target
		for _, def := range []uint16{0, 80} {
			if tg, err := parseAuthority(s, def); err == nil {
				got = append(got, tg)
			}
		}
		if tg, _, err := parseAbsoluteURI("GET", s); err == nil {
			got = append(got, tg)
		}
		for _, tg := range got {
			for i := 0; i < len(tg.host); i++ {
				if c := tg.host[i]; c <= ' ' || c >= 0x7f || c == '@' || c == '%' {
					t.Fatalf("%q: host %q holds %q", s, tg.host, c)
				}
			}
			if tg.port == 0 || tg.host == "" {
				t.Fatalf("%q: %+v", s, tg)
			}
			if again, err := parseAuthority(tg.authority(), 0); err != nil || again != tg {
				t.Fatalf("%q: %+v renders as %q, which parses as %+v, %v", s, tg, tg.authority(), again, err)
			}
			if ip, err := netip.ParseAddr(tg.host); (err == nil) != tg.ip.IsValid() || (err == nil && ip != tg.ip) {
				t.Fatalf("%q: host %q and address %v disagree", s, tg.host, tg.ip)
			}
			if d := pol.Host(tg.host); d.Rule == "network" {
				t.Fatalf("%q: the proxy accepts %q, the policy calls it malformed: %s", s, tg.host, d.Reason)
			}
		}
	})
}

// FuzzProxyToken: whatever Proxy-Authorization values a sandbox sends, the token reader
// never panics; a token it finds starts with the capability prefix and is one of the
// values' credentials as sent (a Bearer credential, or a Basic user name or password),
// never a mix of them; and it errs only when more than one value carries a token.
func FuzzProxyToken(f *testing.F) {
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	f.Add("Bearer pdk1.AAAA", "")
	f.Add("Basic "+b64("pdk1.AAAA:"), "")
	f.Add("Basic "+b64(":pdk1.AAAA"), "Bearer pdk1.BBBB")
	f.Add("Basic "+b64("user:secret"), "Negotiate abc")
	f.Add("basic   "+b64("pdk1.x:pdk1.y"), "")
	f.Add("Bearer", "Basic !!!")
	f.Fuzz(func(t *testing.T, a, b string) {
		var values []string
		for _, v := range []string{a, b} {
			if v != "" {
				values = append(values, v)
			}
		}
		token, err := proxyToken(values)
		carrying := 0
		for _, v := range values {
			if credentialToken(v) != "" {
				carrying++
			}
		}
		switch {
		case err != nil:
			if carrying < 2 || token != "" {
				t.Fatalf("error %v with %d values carrying a token (token %q)", err, carrying, token)
			}
		case token == "":
			if carrying != 0 {
				t.Fatalf("no token found in %q, but %d values carry one", values, carrying)
			}
		default:
			if !strings.HasPrefix(token, capabilityPrefix) || carrying != 1 {
				t.Fatalf("token %q from %q (%d values carry one)", token, values, carrying)
			}
			if !slices.ContainsFunc(values, func(v string) bool { return strings.Contains(v, token) || basicHolds(v, token) }) {
				t.Fatalf("token %q is not a credential of %q", token, values)
			}
		}
	})
}

// basicHolds reports whether v is Basic credentials whose user name or password is token.
func basicHolds(v, token string) bool {
	_, cred, _ := strings.Cut(strings.TrimSpace(v), " ")
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return false
	}
	user, pass, _ := strings.Cut(string(raw), ":")
	return user == token || pass == token
}
