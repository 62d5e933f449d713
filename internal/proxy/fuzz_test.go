package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
)

var fuzzReserved = func(name string) bool {
	return strings.EqualFold(name, sessionCookie) || strings.EqualFold(name, roleCookie)
}

// FuzzFilterCookies: whatever the client sends, no pair that any usual parser would read
// as a reserved cookie reaches the app, and every pair that does was in the input.
func FuzzFilterCookies(f *testing.F) {
	for _, s := range []string{
		"paddock_session=abc; app=1",
		` "paddock_session"=x;;app=2 ;PADDOCK_ROLE=dev`,
		"paddock_session",
		"a=b; paddock_session=1; paddock_session=2",
		"\tpaddock_role\t=live",
		"app=\"x;paddock_session=y\"",
	} {
		f.Add(s, "other=1")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		out := filterCookies([]string{a, b}, fuzzReserved)
		in := a + ";" + b
		for pair := range strings.SplitSeq(out, ";") {
			pair = strings.TrimSpace(pair)
			if fuzzReserved(cookieName(pair)) {
				t.Fatalf("reserved pair %q passed in %q", pair, out)
			}
			if !strings.Contains(in, pair) {
				t.Fatalf("pair %q was not in the input", pair)
			}
		}
		if cs, err := http.ParseCookie(out); err == nil {
			for _, c := range cs {
				if fuzzReserved(c.Name) {
					t.Fatalf("net/http parses reserved cookie %q from %q", c.Name, out)
				}
			}
		}
		req := &http.Request{Header: http.Header{"Cookie": {out}}}
		for _, c := range req.Cookies() {
			if fuzzReserved(c.Name) {
				t.Fatalf("net/http reads reserved cookie %q from %q", c.Name, out)
			}
		}
	})
}

// FuzzDropReservedSetCookies: a sandbox cannot set a reserved cookie, however it spells
// the Set-Cookie: case, whitespace, quotes, __Host-/__Secure- prefixes, or a nameless
// cookie whose value a browser sends back as "paddock_session=…".
func FuzzDropReservedSetCookies(f *testing.F) {
	for _, s := range []string{
		"paddock_session=x; Path=/; HttpOnly",
		" paddock_role =dev",
		"PADDOCK_SESSION=y",
		"paddock_session",
		"\"paddock_session\"=z",
		"app=1; paddock_session=2",
		"=paddock_session=x; Path=/api/v1",
		" = paddock_session=x",
		"__Host-paddock_session=x; Secure; Path=/",
		"__Secure-PADDOCK_ROLE=dev",
		"__host-__secure-paddock_session=x",
		"\"=paddock_role=dev\"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{"Set-Cookie": {v, "app=1"}}
		dropReservedSetCookies(h, func(n string) bool { return reservedSpelling(canonicalCookieName(n)) })
		res := &http.Response{Header: h}
		for _, c := range res.Cookies() {
			if namesReserved(c.Name) {
				t.Fatalf("Set-Cookie %q still sets %q", v, c.Name)
			}
		}
		for _, kept := range h.Values("Set-Cookie") {
			for _, name := range browserNames(kept) {
				if namesReserved(name) {
					t.Fatalf("kept %q: a browser would send a cookie named %q", kept, name)
				}
			}
		}
	})
}

// namesReserved is the test's own reading of "names a reserved cookie in any spelling",
// kept apart from the proxy's.
func namesReserved(name string) bool {
	n := strings.ToLower(strings.Trim(name, " \t\r\n\v\f\u0085\u00a0\"="))
	for _, p := range []string{"__host-", "__secure-", "__host-", "__secure-"} {
		n = strings.Trim(strings.TrimPrefix(n, p), " \t\r\n\v\f\u0085\u00a0\"=")
	}
	return reservedSpelling(n)
}

func reservedSpelling(n string) bool { return n == sessionCookie || n == roleCookie }

// browserNames are the names a browser's cookie store could end up sending for one
// Set-Cookie value: its name, and for a nameless cookie, the name its value reads as
// when sent back in a Cookie header.
func browserNames(v string) []string {
	first, _, _ := strings.Cut(v, ";")
	name, value, hasEq := strings.Cut(first, "=")
	if !hasEq {
		name, value = "", first
	}
	names := []string{name}
	if strings.TrimSpace(name) == "" || strings.Trim(name, " \t\"") == "" {
		back, _, _ := strings.Cut(strings.TrimLeft(value, " \t\"="), "=")
		names = append(names, back, strings.TrimLeft(value, " \t"))
	}
	return names
}

// FuzzUpgradeOf: only a Connection: upgrade with websocket and nothing else in Upgrade
// is a WebSocket; any other protocol named in Upgrade is refused.
func FuzzUpgradeOf(f *testing.F) {
	for _, s := range [][2]string{
		{"websocket", "Upgrade"}, {"h2c", "Upgrade, HTTP2-Settings"}, {"WebSocket, h2c", "upgrade"},
		{"", "upgrade"}, {" , websocket", "keep-alive, Upgrade"}, {"websocket", "close"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, up, conn string) {
		h := http.Header{"Upgrade": {up}, "Connection": {conn}}
		got, err := upgradeOf(h)
		other := false
		for tok := range strings.SplitSeq(up, ",") {
			if tok = strings.TrimSpace(tok); tok != "" && !strings.EqualFold(tok, "websocket") {
				other = true
			}
		}
		if other != (err != nil) {
			t.Fatalf("Upgrade %q: err %v", up, err)
		}
		if got == "websocket" && (other || !strings.Contains(strings.ToLower(conn), "upgrade")) {
			t.Fatalf("Upgrade %q Connection %q taken as a WebSocket", up, conn)
		}
	})
}

// FuzzCheckOrigin: an Origin passes only as this host or a trusted origin.
func FuzzCheckOrigin(f *testing.F) {
	for _, s := range []string{"http://self.test", "https://self.test", "https://trusted.test", "null",
		"https://self.test.evil", "https://user@self.test", "https://self.test/path", "HTTPS://SELF.TEST"} {
		f.Add(s)
	}
	p := &Proxy{trusted: map[string]bool{"https://trusted.test": true}}
	f.Fuzz(func(t *testing.T, origin string) {
		r := &http.Request{Host: "self.test", Header: http.Header{"Origin": {origin}}}
		if p.checkOrigin(r) != nil || origin == "" {
			return
		}
		n, err := normalizeOrigin(origin)
		if err != nil || (n != "http://self.test" && n != "https://self.test" && n != "https://trusted.test") {
			t.Fatalf("origin %q (%q) accepted", origin, n)
		}
	})
}

// FuzzDirectAnswer: whatever bytes an app answers a GET with, the direct transport returns
// an error or a response whose body ends, and keeps the connection only after a complete
// answer with nothing after it.
func FuzzDirectAnswer(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n2\r\nok\r\n0\r\nX-T: 1\r\n\r\n",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n",
		"HTTP/1.0 200 OK\r\n\r\nto the end",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nab",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab",
		"garbage",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, answer []byte) {
		near, far := net.Pipe()
		defer near.Close()
		go func() {
			defer far.Close()
			_, _ = far.Read(make([]byte, 4096)) // the request's head
			_, _ = far.Write(answer)
		}()
		tr := newDirectTransport(func(context.Context, string, string) (net.Conn, error) { return near, nil }, http.DefaultTransport)
		req, _ := http.NewRequest("GET", "http://sb-1/", nil)
		c, _, err := tr.get(req.Context(), "sb-1")
		if err != nil {
			t.Fatal(err)
		}
		res, _, err := tr.exchange(req, c, func(bw *bufio.Writer) error { return writeHead(bw, req) }, nil)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 1<<20))
		res.Body.Close()
		if n := len(tr.idle["sb-1"]); n > 1 {
			t.Fatalf("%d idle connections from one exchange", n)
		}
	})
}

// FuzzPlainHead: whatever head a client sends, the head the proxy writes for the app
// parses, names the same method, target and host, carries the proxy's own X-Paddock-*
// and forwarding headers alone, and no credential, reserved cookie or hop-by-hop header.
func FuzzPlainHead(f *testing.F) {
	for _, s := range []string{
		"GET /a?b=1 HTTP/1.1\r\nHost: live-u1.apps.test\r\nCookie: paddock_session=s; app=1\r\nAuthorization: Bearer x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Secret\r\nX-Secret: 1\r\nTE: trailers, gzip\r\nKeep-Alive: 5\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: h\r\nConnection: cookie, te\r\nCookie: app=1\r\nTE: trailers\r\n\r\n",
		"HEAD /%2F/x HTTP/1.1\r\nHost: h\r\nX-Paddock-Role: dev\r\nx-forwarded-for: 6.6.6.6\r\nForwarded: for=1\r\nX-Real-IP: 1\r\n\r\n",
		"DELETE /x HTTP/1.0\r\nHost: h\r\nProxy-Authorization: x\r\nX-CSRF-Token: t\r\nUser-Agent:\r\nCookie: \"PADDOCK_ROLE\"=dev\r\nCookie: a=b\r\n\r\n",
		"POST /form HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	p, err := New(&testRouter{}, Options{ReservedCookies: []string{sessionCookie, roleCookie}})
	if err != nil {
		f.Fatal(err)
	}
	info := &reqInfo{caller: Caller{UserID: "u1", Role: "live"}, target: Target{SandboxID: "sb-1"}}
	f.Fuzz(func(t *testing.T, head []byte) {
		in, err := http.ReadRequest(bufio.NewReader(strings.NewReader(string(head))))
		if err != nil || in.URL.IsAbs() {
			return // the server refuses it, or answers an absolute target itself
		}
		if in.ContentLength == 0 && len(in.TransferEncoding) == 0 {
			in.Body = http.NoBody // as the server sets it
		}
		if !plain(in) {
			return
		}
		in.RemoteAddr = "192.0.2.1:4000"
		var b strings.Builder
		bw := bufio.NewWriter(&b)
		if err := p.writePlainHead(bw, in, info); err != nil {
			t.Fatal(err)
		}
		out, err := http.ReadRequest(bufio.NewReader(strings.NewReader(b.String())))
		if err != nil {
			t.Fatalf("the app cannot parse %q: %v", b.String(), err)
		}
		if out.Method != in.Method || out.URL.RequestURI() != in.URL.RequestURI() || out.Host != headerValue(in.Host) || out.ContentLength > 0 {
			t.Fatalf("%s %s on %q (length %d) went out as %s %s on %q (length %d)", in.Method, in.URL.RequestURI(), in.Host, in.ContentLength,
				out.Method, out.URL.RequestURI(), out.Host, out.ContentLength)
		}
		for _, k := range []string{"Authorization", "Proxy-Authorization", "X-Csrf-Token", "Forwarded", "X-Real-Ip",
			"Connection", "Keep-Alive", "Proxy-Connection", "Upgrade", "Transfer-Encoding", "Trailer"} {
			if v, ok := out.Header[k]; ok {
				t.Fatalf("%s: %q reached the app", k, v)
			}
		}
		for _, c := range out.Cookies() {
			if namesReserved(c.Name) {
				t.Fatalf("reserved cookie %q reached the app", c.Name)
			}
		}
		want := map[string]string{api.HeaderRole: "live", api.HeaderSandbox: "sb-1", "X-Forwarded-For": "192.0.2.1",
			"X-Forwarded-Host": headerValue(in.Host), "X-Forwarded-Proto": "http"}
		for k, vs := range out.Header {
			if !hasPrefixFold(k, "X-Paddock-") && !hasPrefixFold(k, "X-Forwarded-") {
				continue
			}
			if w, ok := want[k]; !ok || len(vs) != 1 || vs[0] != w {
				t.Fatalf("%s: %q reached the app", k, vs)
			}
		}
		for _, tok := range strings.Split(in.Header.Get("Connection"), ",") {
			if tok = strings.TrimSpace(tok); tok != "" && out.Header.Get(tok) != "" && !hasPrefixFold(tok, "X-Paddock-") && !hasPrefixFold(tok, "X-Forwarded-") && !strings.EqualFold(tok, "Host") {
				t.Fatalf("%s, named by Connection, reached the app", tok)
			}
		}
	})
}
