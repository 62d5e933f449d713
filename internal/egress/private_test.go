package egress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/policy"
	"github.com/paddockhq/paddock/internal/testenv"
)

// withPolicy makes the harness's proxy decide by src alone, with no test-only exemption
// of the upstream servers' loopback address.
func withPolicy(t *testing.T, src string) func(*Options) {
	t.Helper()
	pol, err := policy.Load([]byte(src), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return func(o *Options) { o.Decider, o.UnsafeAllowAddrs = pol, nil }
}

// network.private lets a named host, or any allowed host within a listed range, be reached
// at a private address; every other host stays refused there, and a metadata endpoint
// stays refused even within a listed range.
func TestPrivateAllow(t *testing.T) {
	for _, c := range []struct {
		name, private, host string
		want                int
		says                string
	}{
		{"a named host", `["registry.corp.test"]`, "registry.corp.test", 200, ""},
		{"a host not named", `["registry.corp.test"]`, "allowed.test", 403, "loopback"},
		{"a listed range", `["127.0.0.0/24"]`, "allowed.test", 200, ""},
		{"a range that does not hold it", `["10.20.0.0/16"]`, "allowed.test", 403, "network.private"},
		{"a metadata endpoint in a listed range", `["169.254.0.0/16", "meta.test"]`, "meta.test", 403, "metadata"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, withPolicy(t, "network:\n  default: deny\n  allow: [registry.corp.test, allowed.test, meta.test]\n  private: "+c.private+"\n"))
			h.resolver.mu.Lock()
			h.resolver.names["registry.corp.test"] = addrs(upstreamAddr)
			h.resolver.mu.Unlock()
			res, err := h.client(nil).Get(fmt.Sprintf("http://%s:%d/echo", c.host, h.pport))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != c.want || !strings.Contains(string(body)+res.Status, c.says) {
				t.Errorf("GET %s: %s %q, want %d saying %q", c.host, res.Status, body, c.want, c.says)
			}
		})
	}
}

func TestPrivatePolicyErrors(t *testing.T) {
	for _, bad := range []string{`["0.0.0.0/0"]`, `["*"]`, `["http://x"]`} {
		_, err := policy.Load([]byte("network:\n  default: deny\n  private: "+bad+"\n"), "p.yaml")
		if err == nil || !strings.Contains(err.Error(), "network.private[0]") {
			t.Errorf("private: %s: %v, want an error naming network.private[0]", bad, err)
		}
	}
}

// With an upstream proxy the proxy still decides every request, then connects through
// it: a plain request goes to it in absolute form and a CONNECT as a CONNECT, each with
// its credentials, and it, not the proxy, resolves and connects.
func TestUpstreamProxy(t *testing.T) {
	up, logf := testenv.StartTinyproxy(t, "paddock", "s3cret")
	u, err := ParseUpstreamProxy(up)
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(o *Options) { o.UpstreamProxy, o.UnsafeAllowAddrs = u, nil })
	target := fmt.Sprintf("http://%s:%d/echo", upstreamAddr, h.pport)
	res, err := h.client(nil).Get(target)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(h.lastSeen().Header.Get("Via"), "tinyproxy") {
		t.Errorf("plain GET through the upstream proxy: %s %q; the server saw Via %q", res.Status, body, h.lastSeen().Header.Get("Via"))
	}
	res, err = h.client(nil).Get(fmt.Sprintf("https://%s:%d/", upstreamAddr, h.sport))
	if err != nil {
		t.Fatalf("CONNECT through the upstream proxy: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Errorf("CONNECT through the upstream proxy: %s", res.Status)
	}
	log, _ := os.ReadFile(logf)
	if !strings.Contains(string(log), "CONNECT "+upstreamAddr) {
		t.Errorf("tinyproxy's log has no CONNECT to %s:\n%s", upstreamAddr, log)
	}
	// Still decided here: a host the policy does not allow never reaches the upstream.
	res, err = h.client(nil).Get(fmt.Sprintf("http://unlisted.test:%d/", h.pport))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 403 || strings.Contains(readFile(logf), "unlisted.test") {
		t.Errorf("an unlisted host through the upstream proxy: %s", res.Status)
	}

	// Wrong credentials: the upstream's refusal is named.
	bad, _ := ParseUpstreamProxy(strings.Replace(up, "s3cret", "wrong", 1))
	h2 := newHarness(t, func(o *Options) { o.UpstreamProxy, o.UnsafeAllowAddrs = bad, nil })
	res, err = h2.client(nil).Get(fmt.Sprintf("https://%s:%d/", upstreamAddr, h2.sport))
	if err == nil {
		res.Body.Close()
		t.Fatal("CONNECT with wrong upstream credentials succeeded")
	}
	resp, rbody, _, _ := h2.raw(fmt.Sprintf("CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n", upstreamAddr, h2.sport, upstreamAddr, h2.sport))
	if resp.StatusCode != 502 || !strings.Contains(resp.Status+rbody, "refused CONNECT") {
		t.Errorf("CONNECT with wrong upstream credentials: %s %q", resp.Status, rbody)
	}
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func TestParseUpstreamProxy(t *testing.T) {
	for _, bad := range []string{"", "socks5://h:1", "http://h", "http://h:1/path", "https://user:pw@h:1"} {
		if _, err := ParseUpstreamProxy(bad); err == nil {
			t.Errorf("ParseUpstreamProxy(%q) accepted", bad)
		} else if strings.Contains(err.Error(), "pw") {
			t.Errorf("ParseUpstreamProxy(%q): %v shows the password", bad, err)
		}
	}
}
