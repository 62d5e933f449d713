package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// rawApp is an app on a loopback port that answers each connection with serve, so that a
// test can misbehave in ways net/http's server would not.
func rawApp(t *testing.T, serve func(c net.Conn)) (dial func(context.Context) (net.Conn, error), accepted func() int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var mu sync.Mutex
	n := 0
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			n++
			mu.Unlock()
			go serve(c)
		}
	}()
	dial = func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", l.Addr().String())
	}
	return dial, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// readHead reads one request's head from br.
func readHead(c net.Conn, buf []byte) (string, error) {
	var head []byte
	for !strings.Contains(string(head), "\r\n\r\n") {
		n, err := c.Read(buf)
		if err != nil {
			return string(head), err
		}
		head = append(head, buf[:n]...)
	}
	return string(head), nil
}

// TestIdleConnClosedByAppIsRetried: an app that closes a kept-alive connection after each
// answer (without saying so) costs the next GET nothing but a new connection.
func TestIdleConnClosedByAppIsRetried(t *testing.T) {
	h, accepted := newRawHarness(t, func(c net.Conn) {
		defer c.Close()
		if _, err := readHead(c, make([]byte, 4096)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	for i := range 5 {
		res := get(t, newRequest(t, "GET", h.front.URL+"/x"))
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK || string(b) != "ok" {
			t.Fatalf("GET %d: %d %q", i, res.StatusCode, b)
		}
	}
	if n := accepted(); n < 5 {
		t.Errorf("%d connections for 5 requests to an app that closes each", n)
	}
}

// testRouterDial routes the live role to a raw app.
type testRouterDial struct {
	*testRouter
	dial func(context.Context) (net.Conn, error)
}

func (r *testRouterDial) Route(_ context.Context, _, role string) (Target, int64, error) {
	return Target{SandboxID: "sb-raw", Role: role, Dial: r.dial}, 0, nil
}

// newRawHarness is a harness whose live role is a raw app.
func newRawHarness(t *testing.T, serve func(c net.Conn)) (*harness, func() int) {
	h := newHarness(t, Options{})
	dial, accepted := rawApp(t, serve)
	h.p.router = &testRouterDial{testRouter: h.router, dial: dial}
	return h, accepted
}

// TestHugeResponseHeadRefused: an app whose answer's head never ends is cut off at the
// bound and the client gets a 502, not a proxy that buffers it all.
func TestHugeResponseHeadRefused(t *testing.T) {
	done := make(chan struct{})
	h, _ := newRawHarness(t, func(c net.Conn) {
		defer c.Close()
		if _, err := readHead(c, make([]byte, 4096)); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		line := "X-Junk: " + strings.Repeat("a", 1000) + "\r\n"
		for range 2 * maxResponseHeaderBytes / len(line) {
			if _, err := io.WriteString(c, line); err != nil {
				return
			}
		}
		<-done // the head never ends
	})
	t.Cleanup(func() { close(done) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := get(t, newRequest(t, "GET", h.front.URL+"/x").WithContext(ctx))
	if res.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", res.StatusCode)
	}
}

// TestKeepAliveToApp: serial requests reuse one connection to the app, and a body the
// client left half-read does not put its connection back.
func TestKeepAliveToApp(t *testing.T) {
	h := newHarness(t, Options{})
	for range 10 {
		res := get(t, newRequest(t, "GET", h.front.URL+"/x"))
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
	if n := h.router.live.dials.Load(); n != 1 {
		t.Errorf("%d connections to the app for 10 serial requests, want 1", n)
	}
	// A large answer the client abandons: its connection is closed, not reused.
	ctx, cancel := context.WithCancel(context.Background())
	req := newRequest(t, "GET", h.front.URL+"/big?n=100000000").WithContext(ctx)
	res := get(t, req)
	if _, err := io.ReadFull(res.Body, make([]byte, 1<<16)); err != nil {
		t.Fatal(err)
	}
	cancel()
	res.Body.Close()
	res = get(t, newRequest(t, "GET", h.front.URL+"/x"))
	b, _ := io.ReadAll(res.Body)
	if string(b) != "sb-live" {
		t.Fatalf("after an abandoned body: %q", b)
	}
}

// TestIdleAppConnsHoldNoGoroutines: a connection to an app kept for the next request
// holds no goroutine of the proxy's (http.Transport keeps two per connection).
func TestIdleAppConnsHoldNoGoroutines(t *testing.T) {
	h := newHarness(t, Options{})
	const n = 8
	settle := func() int {
		last, same := runtime.NumGoroutine(), 0
		for deadline := time.Now().Add(10 * time.Second); same < 20 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
			if g := runtime.NumGoroutine(); g == last {
				same++
			} else {
				last, same = g, 0
			}
		}
		return last
	}
	before := settle()
	// n requests at once, each on a client connection that closes after it, so that n
	// connections to the app are left idle in the pool and nothing else is.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	var wg sync.WaitGroup
	release := make(chan struct{})
	for range n {
		wg.Go(func() {
			req := newRequest(t, "GET", h.front.URL+"/sse")
			res, err := client.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer res.Body.Close()
			<-release
			io.Copy(io.Discard, res.Body)
		})
	}
	for deadline := time.Now().Add(10 * time.Second); h.router.live.dials.Load() < n && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	close(release)
	for range 5 * n {
		h.router.live.sse <- struct{}{}
	}
	wg.Wait()
	if d := h.router.live.dials.Load(); d != n {
		t.Fatalf("%d connections to the app, want %d", d, n)
	}
	// Left: the app's server holds one goroutine per idle connection; the proxy none.
	if grown := settle() - before; grown > n+n/2 {
		t.Errorf("%d goroutines more with %d idle connections to the app, want at most %d", grown, n, n+n/2)
	}
}

// TestDirectTransportForOtherHops: NewDirectTransport behind another reverse proxy (the
// replicas' hop) keeps one connection for serial requests, and hands an upgrade to its
// fallback, whose answer's body is the connection a WebSocket needs.
func TestDirectTransportForOtherHops(t *testing.T) {
	back := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") == "" {
			io.WriteString(w, "plain")
			return
		}
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		typ, b, err := ws.Read(r.Context())
		if err == nil {
			ws.Write(r.Context(), typ, b)
		}
	}))
	defer back.Close()
	var dials atomic.Int64
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	target, _ := url.Parse(back.URL)
	front := httptest.NewServer(&httputil.ReverseProxy{
		Rewrite:    func(pr *httputil.ProxyRequest) { pr.SetURL(target) },
		Transport:  NewDirectTransport(dial, &http.Transport{DialContext: dial}),
		BufferPool: BufferPool(),
	})
	defer front.Close()
	for range 10 {
		res, err := http.Get(front.URL + "/x")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(b) != "plain" {
			t.Fatalf("through the hop: %q, want plain", b)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("%d connections for 10 serial requests, want 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, strings.Replace(front.URL, "http", "ws", 1)+"/ws", nil)
	if err != nil {
		t.Fatalf("a WebSocket through the hop: %v", err)
	}
	defer ws.CloseNow()
	if err := ws.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, b, err := ws.Read(ctx); err != nil || string(b) != "hi" {
		t.Errorf("echo through the hop: %q %v, want hi", b, err)
	}
}
