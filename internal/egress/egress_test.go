package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/policy"
)

// An allowed host is reached over HTTPS through CONNECT: a real TLS client verifies the
// upstream's certificate end to end, and the audit trail shows the tunnel opening and
// closing, for this sandbox, with the address and the bytes.
func TestConnectAllowed(t *testing.T) {
	h := newHarness(t, nil)
	for _, host := range []string{"allowed.test", "ok.wild.test"} {
		t.Run(host, func(t *testing.T) {
			c := h.client(nil)
			res, err := c.Get(fmt.Sprintf("https://%s:%d/hello", host, h.sport))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if want := "hello over TLS, sni=" + host; res.StatusCode != 200 || !strings.HasPrefix(string(body), want) {
				t.Fatalf("got %d %q, want 200 %q…", res.StatusCode, body, want)
			}
			c.Transport.(*http.Transport).CloseIdleConnections()
			opened := h.waitEvent(host, StageOpened)
			closed := h.waitEvent(host, StageClosed)
			wantAddr := netip.AddrPortFrom(netip.MustParseAddr(upstreamAddr), h.sport)
			for _, e := range []Event{opened, closed} {
				if e.Sandbox != sandboxID || e.Method != "CONNECT" || e.Port != h.sport || e.Addr != wantAddr ||
					e.ServerName != host || !e.Decision.Allow || !strings.HasPrefix(e.Decision.Rule, "network.allow") {
					t.Errorf("event %+v", e)
				}
			}
			if closed.ID != opened.ID || closed.BytesIn == 0 || closed.BytesOut == 0 || closed.Duration <= 0 {
				t.Errorf("closed event %+v", closed)
			}
		})
	}
	if n := h.counter("paddock_egress_requests_total", "decision", "allow"); n < 2 {
		t.Errorf("allow counter = %v, want ≥ 2", n)
	}
	if n := h.counter("paddock_egress_bytes_total", "direction", "in"); n == 0 {
		t.Errorf("bytes in counter = 0")
	}
}

// An allowed host is reached over plain HTTP: the upstream gets the request in origin
// form with the decided Host, the body, and neither the proxy credentials nor any
// hop-by-hop header; the client gets the response without the upstream's hop-by-hop
// headers.
func TestPlainHTTPAllowed(t *testing.T) {
	h := newHarness(t, nil)
	c := h.client(url.UserPassword("sandbox-user", "sandbox-proxy-secret"))
	req, _ := http.NewRequest("POST", fmt.Sprintf("http://allowed.test:%d/echo?q=1", h.pport), strings.NewReader("payload"))
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "must not pass")
	req.Header.Set("Keep-Alive", "timeout=5")
	req.Header.Set("Proxy-Connection", "keep-alive")
	req.Header.Set("Te", "trailers")
	req.Header.Set("X-Kept", "kept")
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	want := fmt.Sprintf("POST /echo?q=1 host=allowed.test:%d body=payload", h.pport)
	if res.StatusCode != 200 || string(body) != want {
		t.Fatalf("got %d %q, want 200 %q", res.StatusCode, body, want)
	}
	if res.Header.Get("X-Upstream") != "plain" {
		t.Errorf("response headers %v", res.Header)
	}
	seen := h.lastSeen()
	for _, k := range []string{"Proxy-Authorization", "X-Hop", "Keep-Alive", "Proxy-Connection", "Te"} {
		if v := seen.Header.Get(k); v != "" {
			t.Errorf("%s reached the upstream: %q", k, v)
		}
	}
	if seen.Header.Get("X-Kept") != "kept" || seen.URI != "/echo?q=1" {
		t.Errorf("upstream saw %+v", seen)
	}
	e := h.waitEvent("allowed.test", StageClosed)
	if e.Sandbox != sandboxID || e.Method != "POST" || e.Status != 200 || e.BytesOut != int64(len("payload")) || e.BytesIn != int64(len(want)) {
		t.Errorf("closed event %+v", e)
	}

	res, err = c.Get(fmt.Sprintf("http://allowed.test:%d/hop", h.pport))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if string(body) != "ok" || res.Header.Get("X-End") != "kept" {
		t.Fatalf("got %q %v", body, res.Header)
	}
	for _, k := range []string{"X-Hop-Response", "Keep-Alive", "Proxy-Authenticate"} {
		if v := res.Header.Get(k); v != "" {
			t.Errorf("the upstream's %s reached the client: %q", k, v)
		}
	}
}

// A plain HTTP client connection carries several requests, with bodies framed either
// way (re-framed by the proxy), and answers framed every way an upstream can frame them.
func TestPlainHTTPKeepAliveAndFraming(t *testing.T) {
	h := newHarness(t, nil)
	c := h.dial()
	br := bufio.NewReader(c)
	p := h.pport
	for i, tt := range []struct {
		request, want string
	}{
		{fmt.Sprintf("PUT http://allowed.test:%d/echo HTTP/1.1\r\nHost: allowed.test:%d\r\nTransfer-Encoding: chunked\r\n\r\n3\r\none\r\n0\r\nX-Trailer: t\r\n\r\n", p, p), "body=one"},
		{fmt.Sprintf("PUT http://allowed.test:%d/echo HTTP/1.1\r\nHost: allowed.test:%d\r\nContent-Length: 3\r\n\r\ntwo", p, p), "body=two"},
		{fmt.Sprintf("GET http://allowed.test:%d/until-close HTTP/1.1\r\n\r\n", p), "body until close"},
		{fmt.Sprintf("HEAD http://allowed.test:%d/echo HTTP/1.1\r\n\r\n", p), ""},
		{fmt.Sprintf("GET http://allowed.test:%d/echo HTTP/1.1\r\n\r\n", p), "GET /echo"},
	} {
		io.WriteString(c, tt.request)
		method, _, _ := strings.Cut(tt.request, " ")
		res, err := http.ReadResponse(br, &http.Request{Method: method})
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		got, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 || !strings.Contains(string(got), tt.want) || res.Close {
			t.Fatalf("request %d: %d %q close=%v", i, res.StatusCode, got, res.Close)
		}
	}
	// Expect: 100-continue is answered by the proxy, which then forwards the body.
	fmt.Fprintf(c, "PUT http://allowed.test:%d/echo HTTP/1.1\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", p)
	if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != 100 {
		t.Fatalf("waiting for 100 Continue: %v %v", res, err)
	}
	io.WriteString(c, "three")
	if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != 200 {
		t.Fatalf("after the body: %v %v", res, err)
	} else if got, _ := io.ReadAll(res.Body); !strings.HasSuffix(string(got), "body=three") || h.lastSeen().Header.Get("Expect") != "" {
		t.Fatalf("got %q; the upstream saw %v", got, h.lastSeen().Header)
	}

	// A large body both ways, and the bytes counted match.
	const size = 3<<20 + 17
	res, err := h.client(nil).Post(fmt.Sprintf("http://allowed.test:%d/size", p), "application/octet-stream",
		io.LimitReader(zeroReader{}, size))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(got) != fmt.Sprint(size) {
		t.Fatalf("the upstream got %s bytes, want %d", got, size)
	}
	res, err = h.client(nil).Get(fmt.Sprintf("http://allowed.test:%d/big?n=%d", p, size))
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if n != size || err != nil {
		t.Fatalf("downloaded %d bytes, %v", n, err)
	}
	// The proxy records an exchange's end after the client has its last byte.
	var in, out int64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		in, out = 0, 0
		for _, e := range h.eventsAt(StageClosed) {
			in, out = in+e.BytesIn, out+e.BytesOut
		}
		if out >= size && in >= size {
			return
		}
	}
	t.Errorf("closed events count %d bytes out, %d in; want at least %d each", out, in, size)
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func (h *harness) eventsAt(stage Stage) []Event {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []Event
	for _, e := range h.events {
		if e.Stage == stage {
			out = append(out, e)
		}
	}
	return out
}

// A response streams to the client as the upstream sends it, not once it is complete.
func TestPlainHTTPStreams(t *testing.T) {
	release := make(chan struct{})
	h := newHarness(t, nil)
	h.plain.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "rest\n")
	})
	defer close(release)
	res, err := h.client(nil).Get(fmt.Sprintf("http://allowed.test:%d/stream", h.pport))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	line, err := bufio.NewReader(res.Body).ReadString('\n')
	if err != nil || line != "first\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
}

// Requests the policy or the proxy refuses: the status, the rule and the reason say why,
// the event names the sandbox, and a name that was refused before resolution never
// reached DNS.
func TestRefused(t *testing.T) {
	h := newHarness(t, nil)
	p, s := h.pport, h.sport
	connect := func(authority string) string {
		return "CONNECT " + authority + " HTTP/1.1\r\nHost: " + authority + "\r\n\r\n"
	}
	get := func(uri, host string) string {
		return "GET " + uri + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n"
	}
	tests := []struct {
		name       string
		request    string
		status     int
		rule       string
		reason     string
		unresolved string // a name that must not have been looked up
	}{
		{"unlisted host", connect(fmt.Sprintf("unlisted.test:%d", s)), 403, "network.default", "not on the allow list", "unlisted.test"},
		{"unlisted host, plain", get(fmt.Sprintf("http://unlisted.test:%d/", p), fmt.Sprintf("unlisted.test:%d", p)), 403, "network.default", "not on the allow list", "unlisted.test"},
		{"deny wins over a wildcard", connect(fmt.Sprintf("evil.wild.test:%d", s)), 403, "network.deny[0]", "evil.wild.test", "evil.wild.test"},
		{"allowed name resolving to 127.0.0.1", connect(fmt.Sprintf("rebind.test:%d", s)), 403, "egress.address", "127.0.0.1 is loopback", ""},
		{"allowed name resolving to metadata", connect(fmt.Sprintf("meta.test:%d", s)), 403, "egress.address", "cloud metadata", ""},
		{"metadata literal, listed", connect(fmt.Sprintf("169.254.169.254:%d", s)), 403, "egress.address", "cloud metadata", ""},
		{"loopback literal, listed", connect(fmt.Sprintf("127.0.0.1:%d", s)), 403, "egress.address", "loopback", ""},
		{"IPv4-mapped loopback literal", connect(fmt.Sprintf("[::ffff:127.0.0.1]:%d", s)), 403, "egress.address", "127.0.0.1 is loopback", ""},
		{"allowed name resolving to IPv4-mapped loopback", connect(fmt.Sprintf("mapped.test:%d", s)), 403, "egress.address", "127.0.0.1 is loopback", ""},
		{"allowed name resolving to NAT64 loopback", connect(fmt.Sprintf("nat64.test:%d", s)), 403, "egress.address", "NAT64 form of 127.0.0.1", ""},
		{"IPv4-mapped metadata, plain", get(fmt.Sprintf("http://[::ffff:169.254.169.254]:%d/", p), fmt.Sprintf("[::ffff:169.254.169.254]:%d", p)), 403, "egress.address", "metadata", ""},
		{"CONNECT to a port not open", connect("allowed.test:22"), 403, "egress.port", "port 22 is not open to CONNECT", "allowed.test"},
		{"CONNECT to 443 when only the test port is open", connect("allowed.test:443"), 403, "egress.port", "", "allowed.test"},
		{"plain HTTP to a port not open", get("http://allowed.test:8080/", "allowed.test:8080"), 403, "egress.port", "port 8080 is not open to plain HTTP", "allowed.test"},
		{"plain HTTP Host mismatch", get(fmt.Sprintf("http://allowed.test:%d/", p), "evil.test"), 400, "egress.host", "the Host header names evil.test", ""},
		{"plain HTTP Host with another port", get(fmt.Sprintf("http://allowed.test:%d/", p), "allowed.test"), 400, "egress.host", "", ""},
		{"CONNECT Host mismatch", fmt.Sprintf("CONNECT allowed.test:%d HTTP/1.1\r\nHost: other.test:%d\r\n\r\n", s, s), 400, "egress.host", "the Host header names other.test", ""},
		{"NUL byte in CONNECT", connect(fmt.Sprintf("unlisted.test\x00.allowed.test:%d", s)), 400, "", "", "unlisted.test"},
		{"NUL byte in the Host header", fmt.Sprintf("CONNECT allowed.test:%d HTTP/1.1\r\nHost: allowed.test\x00.evil:%d\r\n\r\n", s, s), 400, "", "", ""},
		{"userinfo in CONNECT", connect(fmt.Sprintf("evil.test@allowed.test:%d", s)), 400, "egress.host", "user information", "evil.test"},
		{"userinfo in the absolute URI", get(fmt.Sprintf("http://user:pw@allowed.test:%d/", p), "allowed.test"), 400, "egress.host", "user information", ""},
		{"percent-encoded host", connect(fmt.Sprintf("allowed%%2etest:%d", s)), 400, "", "", ""},
		{"percent-encoded UTF-8 host", connect(fmt.Sprintf("b%%C3%%BCcher.test:%d", s)), 400, "egress.host", "percent-encoding", ""},
		{"IPv6 zone", connect(fmt.Sprintf("[fe80::1%%25eth0]:%d", s)), 400, "", "", ""},
		{"trailing dot", connect(fmt.Sprintf("allowed.test.:%d", s)), 400, "egress.host", "ends with a dot", ""},
		{"empty label", connect(fmt.Sprintf("allowed..test:%d", s)), 400, "egress.host", "empty label", ""},
		{"numeric host", connect(fmt.Sprintf("127.1:%d", s)), 400, "egress.host", "resolvers would read it", ""},
		{"decimal host", connect(fmt.Sprintf("2130706433:%d", s)), 400, "egress.host", "resolvers would read it", ""},
		{"trailing junk after the port", connect(fmt.Sprintf("allowed.test:%dx", s)), 400, "egress.host", "not a number", ""},
		{"no port in CONNECT", connect("allowed.test"), 400, "egress.host", "no port", ""},
		{"over-long name", connect(strings.Repeat("a.", 130) + "test:443"), 400, "egress.host", "over", ""},
		{"origin-form request", get("/", "allowed.test"), 400, "egress.host", "this is a proxy", ""},
		{"https absolute URI", get("https://allowed.test/", "allowed.test"), 400, "egress.host", "use CONNECT", ""},
		{"header too large", "GET http://allowed.test/ HTTP/1.1\r\nX-Big: " + strings.Repeat("a", 100<<10) + "\r\n\r\n", 431, "egress.request", "over", ""},
		{"garbage", "\x16\x03\x01\x00\x05hello\r\n\r\n", 400, "egress.request", "is not METHOD TARGET HTTP/1.1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, body, _, _ := h.raw(tt.request)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %s", res.StatusCode, tt.status, body)
			}
			if !strings.Contains(body, "(rule "+tt.rule) || !strings.Contains(body, tt.reason) {
				t.Errorf("body %q, want rule %q and reason containing %q", body, tt.rule, tt.reason)
			}
			if ps := res.Header.Get("Proxy-Status"); !strings.HasPrefix(ps, "paddock-egress; error=") {
				t.Errorf("Proxy-Status %q", ps)
			}
			if !res.Close {
				t.Errorf("a refusal leaves the connection open")
			}
			if tt.unresolved != "" && h.resolver.wasAsked(tt.unresolved) {
				t.Errorf("%s was resolved", tt.unresolved)
			}
		})
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	denied := 0
	for _, e := range h.events {
		if e.Sandbox != sandboxID {
			t.Errorf("event without the sandbox: %+v", e)
		}
		if e.Stage == StageDenied {
			denied++
			if e.Decision.Allow || e.Decision.Rule == "" || e.Decision.Reason == "" {
				t.Errorf("denied event %+v", e)
			}
		}
	}
	if denied != len(tests) {
		t.Errorf("%d denied events for %d refusals", denied, len(tests))
	}
	if n := h.counter("paddock_egress_requests_total", "decision", "deny"); n != float64(len(tests)) {
		t.Errorf("deny counter = %v, want %d", n, len(tests))
	}
}

// An allowed name that resolves to loopback is refused without the proxy ever
// connecting there: a server on 127.0.0.1 at the same port sees nothing.
func TestRebindingNeverConnects(t *testing.T) {
	h := newHarness(t, nil)
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", h.sport))
	if err != nil {
		t.Skipf("cannot listen on 127.0.0.1:%d to watch for connections: %v", h.sport, err)
	}
	defer l.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Close()
			accepted <- struct{}{}
		}
	}()
	res, body, _, _ := h.raw(fmt.Sprintf("CONNECT rebind.test:%d HTTP/1.1\r\n\r\n", h.sport))
	if res.StatusCode != 403 {
		t.Fatalf("status %d: %s", res.StatusCode, body)
	}
	select {
	case <-accepted:
		t.Fatal("the proxy connected to 127.0.0.1")
	case <-time.After(100 * time.Millisecond):
	}
	e := h.waitEvent("rebind.test", StageDenied)
	if e.Addr != netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), h.sport) {
		t.Errorf("event addr %v", e.Addr)
	}
}

// A name with both refused and allowed addresses is reached on an allowed one only.
func TestMixedAnswerUsesOnlyAllowedAddresses(t *testing.T) {
	h := newHarness(t, nil)
	res, err := h.client(nil).Get(fmt.Sprintf("http://mixed.test:%d/echo", h.pport))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("status %d", res.StatusCode)
	}
	if e := h.waitEvent("mixed.test", StageOpened); e.Addr.Addr().String() != upstreamAddr {
		t.Errorf("connected to %v", e.Addr)
	}
}

// The TLS ClientHello must name the host CONNECT asked for: naming another host (even
// one the policy allows, and one the upstream's certificate covers) or none is refused
// with a TLS alert, and a tunnel that does not start with TLS is closed.
func TestConnectServerNameMustMatch(t *testing.T) {
	h := newHarness(t, nil)
	tests := []struct {
		name   string
		sni    string // "" sends none
		reason string
	}{
		{"another host", "other.test", `asks for "other.test", but CONNECT was for allowed.test`},
		{"a denied host", "evil.wild.test", `asks for "evil.wild.test"`},
		{"no server name", "", "names no server"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, _, c, br := h.raw(fmt.Sprintf("CONNECT allowed.test:%d HTTP/1.1\r\nHost: allowed.test:%d\r\n\r\n", h.sport, h.sport))
			if res.StatusCode != 200 {
				t.Fatalf("status %d", res.StatusCode)
			}
			cfg := &tls.Config{ServerName: tt.sni, RootCAs: h.pool}
			if tt.sni == "" {
				cfg.InsecureSkipVerify = true
			}
			tc := tls.Client(bufferedConn{c, br}, cfg)
			err := tc.Handshake()
			if err == nil || !strings.Contains(err.Error(), "access denied") {
				t.Fatalf("handshake: %v, want an access denied alert", err)
			}
			e := h.waitEventRule("egress.sni", tt.reason)
			if e.Host != "allowed.test" || e.ServerName != tt.sni || e.Stage != StageDenied || e.Sandbox != sandboxID {
				t.Errorf("event %+v", e)
			}
		})
	}
	t.Run("not TLS", func(t *testing.T) {
		_, _, c, br := h.raw(fmt.Sprintf("CONNECT allowed.test:%d HTTP/1.1\r\n\r\n", h.sport))
		fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: evil.test\r\n\r\n")
		if b, err := io.ReadAll(br); len(b) != 0 {
			t.Errorf("read %q, %v after a non-TLS start", b, err)
		}
		h.waitEventRule("egress.tls", "did not start with a TLS ClientHello")
	})
	t.Run("IP literal without a server name", func(t *testing.T) {
		res, err := h.client(nil).Get(fmt.Sprintf("https://%s:%d/", upstreamAddr, h.sport))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("status %d", res.StatusCode)
		}
	})
}

func (h *harness) waitEventRule(rule, reason string) Event {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.mu.Lock()
		for _, e := range h.events {
			if e.Decision.Rule == rule && strings.Contains(e.Decision.Reason, reason) {
				h.mu.Unlock()
				return e
			}
		}
		all := fmt.Sprintf("%+v", h.events)
		h.mu.Unlock()
		if time.Now().After(deadline) {
			h.t.Fatalf("no %s event with %q; events: %s", rule, reason, all)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// bufferedConn reads through the bufio.Reader that read the proxy's response, so no byte
// it buffered is lost.
type bufferedConn struct {
	net.Conn
	br *bufio.Reader
}

func (c bufferedConn) Read(b []byte) (int, error) { return c.br.Read(b) }

// Two sandboxes on one proxy: each listener's connections are its sandbox's, decided by
// its own policy, and named so in the audit trail, whatever the requests say.
func TestSandboxIdentityIsTheListener(t *testing.T) {
	h := newHarness(t, nil)
	strict, err := policy.Load([]byte("network:\n  default: deny\n  allow: [other.test]\n"), "strict.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sock := h.sock + "-b"
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- h.proxy.ServeSandbox(l, Sandbox{ID: "sbx-b", Decider: strict}) }()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://allowed.test:%d/ HTTP/1.1\r\nHost: allowed.test:%d\r\nX-Paddock-Sandbox: %s\r\n\r\n", h.pport, h.pport, sandboxID)
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 403 {
		t.Fatalf("sandbox b reached allowed.test: %d", res.StatusCode)
	}
	e := h.waitEvent("allowed.test", StageDenied)
	if e.Sandbox != "sbx-b" || e.Decision.Rule != "network.default" {
		t.Errorf("event %+v", e)
	}
	// Closing sandbox b's listener ends its serving; the other sandbox goes on.
	l.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Errorf("ServeSandbox after its listener closed: %v", err)
	}
	res2, err := h.client(nil).Get(fmt.Sprintf("http://allowed.test:%d/", h.pport))
	if err != nil {
		t.Fatal(err)
	}
	res2.Body.Close()
	if res2.StatusCode != 200 {
		t.Fatalf("sandbox a: %d", res2.StatusCode)
	}
}

// Timeouts: a client that sends no headers is cut off; a tunnel that moves nothing is
// closed after IdleTimeout; one that keeps moving bytes one way is not.
func TestTimeouts(t *testing.T) {
	h := newHarness(t, func(o *Options) {
		o.HeaderTimeout = 200 * time.Millisecond
		o.IdleTimeout = 300 * time.Millisecond
	})
	t.Run("header", func(t *testing.T) {
		c := h.dial()
		io.WriteString(c, "GET http://allowed.test/ HTTP/1.1\r\n")
		start := time.Now()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		io.ReadAll(c)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("a client that sends no headers kept its connection %s", d)
		}
	})
	t.Run("idle tunnel", func(t *testing.T) {
		res, _, c, _ := h.raw(fmt.Sprintf("CONNECT allowed.test:%d HTTP/1.1\r\n\r\n", h.sport))
		if res.StatusCode != 200 {
			t.Fatal(res.Status)
		}
		conf := &tls.Config{ServerName: "allowed.test", RootCAs: h.pool}
		tc := tls.Client(c, conf)
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		tc.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err := tc.Read(make([]byte, 1))
		if d := time.Since(start); err == nil || d > 2*time.Second {
			t.Errorf("idle tunnel: read %v after %s", err, d)
		}
	})
	t.Run("slow download in a tunnel outlives the idle timeout", func(t *testing.T) {
		h.secure.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "40")
			for range 8 {
				io.WriteString(w, "tick\n")
				w.(http.Flusher).Flush()
				time.Sleep(100 * time.Millisecond)
			}
		})
		res, err := h.client(nil).Get(fmt.Sprintf("https://allowed.test:%d/slow", h.sport))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || strings.Count(string(b), "tick") != 8 {
			t.Fatalf("read %q, %v", b, err)
		}
	})
	t.Run("slow download with a length outlives the idle timeout", func(t *testing.T) {
		h.plain.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "40")
			for range 8 {
				io.WriteString(w, "tick\n")
				w.(http.Flusher).Flush()
				time.Sleep(100 * time.Millisecond)
			}
		})
		res, err := h.client(nil).Get(fmt.Sprintf("http://allowed.test:%d/slow", h.pport))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || strings.Count(string(b), "tick") != 8 {
			t.Fatalf("read %q, %v", b, err)
		}
	})
	t.Run("slow download outlives the idle timeout", func(t *testing.T) {
		h.plain.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			for range 8 {
				io.WriteString(w, "tick\n")
				w.(http.Flusher).Flush()
				time.Sleep(100 * time.Millisecond)
			}
		})
		res, err := h.client(nil).Get(fmt.Sprintf("http://allowed.test:%d/slow", h.pport))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || strings.Count(string(b), "tick") != 8 {
			t.Fatalf("read %q, %v", b, err)
		}
	})
}

// A sandbox has at most MaxConns connections; one more is told 503.
func TestMaxConns(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.MaxConns = 2 })
	for range 2 {
		res, _, _, _ := h.raw(fmt.Sprintf("CONNECT allowed.test:%d HTTP/1.1\r\n\r\n", h.sport))
		if res.StatusCode != 200 {
			t.Fatal(res.Status)
		}
	}
	res, body, _, _ := h.raw(fmt.Sprintf("CONNECT allowed.test:%d HTTP/1.1\r\n\r\n", h.sport))
	if res.StatusCode != 503 || !strings.Contains(body, "egress.limit") {
		t.Fatalf("third connection: %d %s", res.StatusCode, body)
	}
}

// Close ends open tunnels and makes Serve return ErrClosed.
func TestClose(t *testing.T) {
	h := newHarness(t, nil)
	res, _, c, _ := h.raw(fmt.Sprintf("CONNECT allowed.test:%d HTTP/1.1\r\n\r\n", h.sport))
	if res.StatusCode != 200 {
		t.Fatal(res.Status)
	}
	h.proxy.Close()
	select {
	case <-h.served:
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after Close")
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Errorf("the tunnel is still open after Close: %v", err)
	}
	if err := h.proxy.Serve(h.dialListener()); !errors.Is(err, ErrClosed) {
		t.Errorf("Serve after Close: %v", err)
	}
}

func (h *harness) dialListener() net.Listener {
	l, err := net.Listen("unix", h.sock+"-2")
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { l.Close() })
	return l
}

// With no policy at all, everything is refused.
func TestNoPolicyFailsClosed(t *testing.T) {
	h := newHarness(t, func(o *Options) { o.Decider = nil })
	res, body, _, _ := h.raw(fmt.Sprintf("CONNECT allowed.test:%d HTTP/1.1\r\n\r\n", h.sport))
	if res.StatusCode != 403 || !strings.Contains(body, "egress.policy") {
		t.Fatalf("%d %s", res.StatusCode, body)
	}
}

// The default dialer checks the address once more just before connecting, whatever
// address reaches it.
func TestDialerChecksAddressAtConnect(t *testing.T) {
	p := New(Options{})
	d := p.dialer.(*net.Dialer)
	for _, a := range []string{"127.0.0.1:80", "[::1]:443", "169.254.169.254:80", "[::ffff:10.0.0.1]:443"} {
		_, err := d.DialContext(context.Background(), "tcp", a)
		if !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("dial %s: %v, want a refusal", a, err)
		}
	}
}

// With AllowOpaqueTunnels a tunnel may carry another protocol, one whose server speaks
// first included; a TLS ClientHello in it is still checked.
func TestOpaqueTunnel(t *testing.T) {
	l, err := net.Listen("tcp", upstreamAddr+":0")
	if err != nil {
		t.Skip(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.WriteString(c, "SSH-2.0-banner\r\n")
				io.Copy(c, c)
			}()
		}
	}()
	bport := port(l.Addr())
	h := newHarness(t, func(o *Options) {
		o.AllowOpaqueTunnels = true
		o.ConnectPorts = append(o.ConnectPorts, bport)
	})
	_, _, c, br := h.raw(fmt.Sprintf("CONNECT allowed.test:%d HTTP/1.1\r\n\r\n", bport))
	line, err := br.ReadString('\n')
	if err != nil || line != "SSH-2.0-banner\r\n" {
		t.Fatalf("banner %q, %v", line, err)
	}
	io.WriteString(c, "SSH-2.0-client\r\n")
	if line, err = br.ReadString('\n'); err != nil || line != "SSH-2.0-client\r\n" {
		t.Fatalf("echo %q, %v", line, err)
	}

	res, _, c2, br2 := h.raw(fmt.Sprintf("CONNECT allowed.test:%d HTTP/1.1\r\n\r\n", h.sport))
	if res.StatusCode != 200 {
		t.Fatal(res.Status)
	}
	err = tls.Client(bufferedConn{c2, br2}, &tls.Config{ServerName: "other.test", RootCAs: h.pool}).Handshake()
	if err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("a mismatched server name in an opaque-capable proxy: %v", err)
	}
}
