package proxy

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

func get(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { res.Body.Close() })
	return res
}

func newRequest(t *testing.T, method, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestRequestHeadersScrubbed(t *testing.T) {
	h := newHarness(t, Options{})
	req := newRequest(t, "GET", h.front.URL+"/headers?q=1")
	req.Header.Add("Cookie", sessionCookie+"=secret; app=1; "+roleCookie+"=live")
	req.Header.Add("Cookie", ` "`+sessionCookie+`"=quoted;other=2`)
	for _, k := range []string{"Authorization", "Proxy-Authorization", "X-CSRF-Token", "X-Paddock-Sandbox",
		"X-Paddock-Role", "X-Paddock-Anything", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded", "X-Real-IP"} {
		req.Header.Set(k, "client-sent")
	}
	res := get(t, req)
	var seen struct {
		Header http.Header
		Host   string
		URI    string
	}
	if err := json.NewDecoder(res.Body).Decode(&seen); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"Cookie":              "app=1; other=2",
		"Authorization":       "",
		"Proxy-Authorization": "",
		"X-Csrf-Token":        "",
		"X-Paddock-Anything":  "",
		"Forwarded":           "",
		"X-Real-Ip":           "",
		"X-Forwarded-For":     "127.0.0.1",
		"X-Forwarded-Host":    strings.TrimPrefix(h.front.URL, "http://"),
		"X-Forwarded-Proto":   "http",
		api.HeaderRole:        "live",
		api.HeaderSandbox:     "sb-live",
	}
	for k, v := range want {
		if got := strings.Join(seen.Header.Values(k), ","); got != v {
			t.Errorf("upstream saw %s = %q, want %q", k, got, v)
		}
	}
	if seen.Host != strings.TrimPrefix(h.front.URL, "http://") || seen.URI != "/headers?q=1" {
		t.Errorf("upstream saw Host %q URI %q", seen.Host, seen.URI)
	}
	if res.Header.Get(api.HeaderRole) != "live" || res.Header.Get(api.HeaderSandbox) != "sb-live" {
		t.Errorf("response role/sandbox headers = %q/%q", res.Header.Get(api.HeaderRole), res.Header.Get(api.HeaderSandbox))
	}
}

func TestResponseHeadersScrubbed(t *testing.T) {
	h := newHarness(t, Options{})
	res := get(t, newRequest(t, "GET", h.front.URL+"/cookies"))
	if got := res.Header.Values("Set-Cookie"); len(got) != 1 || !strings.HasPrefix(got[0], "app=1") {
		t.Errorf("Set-Cookie = %q, want only the app's own cookie", got)
	}
	if res.Header.Get(api.HeaderRole) != "live" || res.Header.Get(api.HeaderSandbox) != "sb-live" {
		t.Errorf("the app could spoof X-Paddock-*: %q/%q", res.Header.Get(api.HeaderRole), res.Header.Get(api.HeaderSandbox))
	}
}

// An app's 1xx response reaches the client without cookies or paddock's own headers, and
// the request counts under its final status.
func TestInformationalHeadersScrubbed(t *testing.T) {
	h := newHarness(t, Options{})
	var hints []http.Header
	req := newRequest(t, "GET", h.front.URL+"/early-hints")
	req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, hdr textproto.MIMEHeader) error {
			hints = append(hints, http.Header(hdr))
			return nil
		},
	}))
	res := get(t, req)
	if res.StatusCode != http.StatusCreated || len(hints) != 1 {
		t.Fatalf("status %d after %d 1xx responses, want 201 after one 103", res.StatusCode, len(hints))
	}
	if hints[0].Get("Link") == "" || hints[0].Get("Set-Cookie") != "" || hints[0].Get("X-Paddock-Role") != "" {
		t.Errorf("the 103 carried %v, want its Link and neither cookies nor X-Paddock-*", hints[0])
	}
	// The proxy counts the request once its handler returns, after the client has the
	// response: wait for it.
	for deadline := time.Now().Add(10 * time.Second); value(t, h.p.m.requests.WithLabelValues("live", "201")) == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got, early := value(t, h.p.m.requests.WithLabelValues("live", "201")), value(t, h.p.m.requests.WithLabelValues("live", "103")); got != 1 || early != 0 {
		t.Errorf("requests counted under 201: %v, under 103: %v; want 1 and 0", got, early)
	}
}

func TestRoleCookieSelectsDev(t *testing.T) {
	h := newHarness(t, Options{})
	req := newRequest(t, "GET", h.front.URL+"/")
	req.AddCookie(&http.Cookie{Name: roleCookie, Value: "dev"})
	res := get(t, req)
	body, _ := io.ReadAll(res.Body)
	if string(body) != "sb-dev" || res.Header.Get(api.HeaderRole) != "dev" {
		t.Errorf("dev role reached %q (role header %q)", body, res.Header.Get(api.HeaderRole))
	}
}

// TestSSEArrivesEventByEvent: the app writes event i+1 only after the client has read
// event i, so any buffering in the proxy deadlocks and fails the test.
// A chunked body of another type (an NDJSON stream) is held back no more than SSE.
func TestSSEArrivesEventByEvent(t *testing.T) {
	for _, ct := range []string{"text/event-stream", "application/x-ndjson"} {
		t.Run(ct, func(t *testing.T) { testStreamArrivesEventByEvent(t, ct) })
	}
}

func testStreamArrivesEventByEvent(t *testing.T, contentType string) {
	h := newHarness(t, Options{})
	res := get(t, newRequest(t, "GET", h.front.URL+"/sse?type="+url.QueryEscape(contentType)))
	if ct := res.Header.Get("Content-Type"); ct != contentType {
		t.Fatalf("Content-Type = %q", ct)
	}
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			if l := sc.Text(); l != "" {
				lines <- l
			}
		}
		close(lines)
	}()
	for i := range 5 {
		select {
		case l := <-lines:
			if want := fmt.Sprintf("data: %d", i); l != want {
				t.Fatalf("event %d = %q, want %q", i, l, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("event %d did not arrive while the app waited: the proxy buffers", i)
		}
		if i < 4 {
			h.router.live.sse <- struct{}{}
		}
	}
	h.router.live.sse <- struct{}{}
	if _, ok := <-lines; ok {
		t.Error("more events than sent")
	}
}

func TestLargeStreamingBody(t *testing.T) {
	h := newHarness(t, Options{})
	const n = 48 << 20
	res := get(t, newRequest(t, "GET", fmt.Sprintf("%s/big?n=%d", h.front.URL, n)))
	sum := sha256.New()
	got, err := io.Copy(sum, res.Body)
	if err != nil || got != n {
		t.Fatalf("read %d bytes, err %v; want %d", got, err, n)
	}
	if want := patternSum(n); string(sum.Sum(nil)) != string(want[:]) {
		t.Error("body corrupted in transit")
	}
}

func TestLargeRequestBody(t *testing.T) {
	h := newHarness(t, Options{})
	req, _ := http.NewRequest("POST", h.front.URL+"/upload", io.LimitReader(pattern{}, 16<<20))
	res := get(t, req)
	if body, _ := io.ReadAll(res.Body); res.StatusCode != 200 || string(body) != "sb-live" {
		t.Errorf("upload: %d %q", res.StatusCode, body)
	}
}

func TestUnavailableUpstream(t *testing.T) {
	h := newHarness(t, Options{})
	h.router.live.srv.Close()
	res := get(t, newRequest(t, "GET", h.front.URL+"/"))
	if res.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", res.StatusCode)
	}
	e := decodeError(t, res.Body)
	if e.Code != api.CodeUnavailable || !strings.HasPrefix(e.Message, "the live sandbox sb-live is not answering: connection refused") {
		t.Errorf("error = %+v", e)
	}
	if strings.Contains(e.Message, "127.0.0.1") {
		t.Errorf("message leaks the app's address: %q", e.Message)
	}
	if res.Header.Get(api.HeaderSandbox) != "sb-live" {
		t.Error("502 does not name the sandbox in its header")
	}
	_, wsRes, err := h.dialWS(t.Context(), "/ws", nil)
	if err == nil || wsRes == nil || wsRes.StatusCode != http.StatusBadGateway {
		t.Errorf("WebSocket to a dead app: err %v, response %v", err, wsRes)
	}
	if got := value(t, h.p.m.upstreamErrors.WithLabelValues("live")); got != 2 {
		t.Errorf("upstream errors = %v, want 2", got)
	}
	if got := value(t, h.p.m.requests.WithLabelValues("live", "502")); got != 2 {
		t.Errorf("requests{502} = %v, want 2", got)
	}
}

func TestUpstreamSwitchingProtocolsRefused(t *testing.T) {
	h := newHarness(t, Options{})
	res := get(t, newRequest(t, "GET", h.front.URL+"/switch"))
	if e := decodeError(t, res.Body); res.StatusCode != http.StatusBadGateway || !strings.Contains(e.Message, "switched protocols") {
		t.Errorf("an app's 101 to a plain request gave %d %+v, want 502", res.StatusCode, e)
	}
}

func TestRouteErrors(t *testing.T) {
	h := newHarness(t, Options{})
	h.router.err = fmt.Errorf("user u1 has no live sandbox: %w", errdefs.ErrNotFound)
	res := get(t, newRequest(t, "GET", h.front.URL+"/"))
	if e := decodeError(t, res.Body); res.StatusCode != 404 || e.Code != api.CodeNotFound {
		t.Errorf("route error: %d %+v", res.StatusCode, e)
	}
}

func TestUpgradeOtherThanWebSocketRefused(t *testing.T) {
	for _, up := range []string{"h2c", "websocket, h2c", "HTTP/2.0", "tls/1.2", "WebSocket,foo"} {
		t.Run(up, func(t *testing.T) {
			h := newHarness(t, Options{})
			req := newRequest(t, "GET", h.front.URL+"/")
			req.Header.Set("Connection", "Upgrade, HTTP2-Settings")
			req.Header.Set("Upgrade", up)
			req.Header.Set("HTTP2-Settings", "AAMAAABkAARAAAAAAAIAAAAA")
			res := get(t, req)
			e := decodeError(t, res.Body)
			if res.StatusCode != 400 || e.Code != api.CodeInvalidArgument || !strings.Contains(e.Message, "Upgrade") {
				t.Errorf("%d %+v", res.StatusCode, e)
			}
			if d := h.router.live.dials.Load(); d != 0 {
				t.Errorf("the refused request reached the app (%d dials)", d)
			}
		})
	}
}

func TestWebSocketOrigin(t *testing.T) {
	tests := []struct {
		origin string
		ok     bool
	}{
		{"", true},
		{"self", true},
		{"https://self", true}, // a TLS proxy in front
		{"https://trusted.example", true},
		{"https://evil.example", false},
		{"null", false},
		{"http://trusted.example", false},
		{"https://self.evil.example", false},
	}
	for _, tt := range tests {
		t.Run(tt.origin, func(t *testing.T) {
			h := newHarness(t, Options{TrustedOrigins: []string{"https://Trusted.example"}})
			host := strings.TrimPrefix(h.front.URL, "http://")
			o := strings.Replace(tt.origin, "self", host, 1)
			if o == host {
				o = h.front.URL
			}
			hdr := http.Header{}
			if o != "" {
				hdr.Set("Origin", o)
			}
			c, res, err := h.dialWS(t.Context(), "/ws", hdr)
			if tt.ok {
				if err != nil {
					t.Fatalf("origin %q refused: %v", o, err)
				}
				c.Close(websocket.StatusNormalClosure, "")
				return
			}
			if err == nil {
				c.CloseNow()
				t.Fatalf("origin %q accepted", o)
			}
			if res == nil || res.StatusCode != http.StatusForbidden {
				t.Errorf("origin %q: %v, want 403", o, err)
			}
			if d := h.router.live.dials.Load(); d != 0 {
				t.Errorf("the refused handshake reached the app")
			}
		})
	}
}

func TestRuntimeMismatch(t *testing.T) {
	h := newHarness(t, Options{})
	h.router.live.build = "b2"
	tests := []struct {
		name, header, query string
		mismatch            bool
	}{
		{"header differs", "b1", "", true},
		{"query differs", "", "b1", true},
		{"same build", "b2", "", false},
		{"not reported", "", "", false},
	}
	want := 0.0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := newRequest(t, "GET", h.front.URL+"/?paddock_build="+tt.query)
			if tt.header != "" {
				req.Header.Set(api.HeaderClientBuild, tt.header)
			}
			res := get(t, req)
			if got := res.Header.Get(api.HeaderMismatch) == "1"; got != tt.mismatch {
				t.Errorf("mismatch header %v, want %v", got, tt.mismatch)
			}
			if tt.mismatch {
				want++
			}
			if got := value(t, h.p.m.mismatch.WithLabelValues("live")); got != want {
				t.Errorf("paddock_runtime_mismatch_total = %v, want %v", got, want)
			}
		})
	}
	c, res, err := h.dialWS(t.Context(), "/ws?paddock_build=b0", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if res.Header.Get(api.HeaderMismatch) != "1" || value(t, h.p.m.mismatch.WithLabelValues("live")) != want+1 {
		t.Error("a WebSocket's mismatch was not flagged")
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	if _, err := New(&testRouter{}, Options{TrustedOrigins: []string{"not an origin"}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("bad trusted origin: %v", err)
	}
	if _, err := New(nil, Options{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("nil router: %v", err)
	}
}

func TestServeAfterClose(t *testing.T) {
	h := newHarness(t, Options{})
	h.p.Close()
	res := get(t, newRequest(t, "GET", h.front.URL+"/"))
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("after Close: %d, want 503", res.StatusCode)
	}
}

var _ = context.Background

// A page (a tab or a frame) that finds the app not answering loads again by itself, as
// after an undo restarts the app; a fetch gets the plain error.
func TestUnavailableUpstreamPageRetries(t *testing.T) {
	h := newHarness(t, Options{})
	h.router.live.srv.Close()
	for dest, want := range map[string]string{"iframe": pageRetrySeconds, "document": pageRetrySeconds, "empty": "", "": ""} {
		req := newRequest(t, "GET", h.front.URL+"/")
		if dest != "" {
			req.Header.Set("Sec-Fetch-Dest", dest)
		}
		res := get(t, req)
		res.Body.Close()
		if res.StatusCode != http.StatusBadGateway || res.Header.Get("Refresh") != want {
			t.Errorf("Sec-Fetch-Dest %q: %d, Refresh %q, want 502 and %q", dest, res.StatusCode, res.Header.Get("Refresh"), want)
		}
	}
}
