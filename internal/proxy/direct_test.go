package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
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
