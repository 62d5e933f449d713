package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/errdefs"
)

// Reserved cookie names in these tests, as the server would configure them.
const (
	sessionCookie = "paddock_session"
	roleCookie    = "paddock_role"
)

// fakeSandbox is a real HTTP server standing in for a sandbox's app. Every answer
// carries its ID, so tests can tell who served them.
type fakeSandbox struct {
	id    string
	build string
	srv   *httptest.Server
	sse   chan struct{} // the SSE handler waits on it between events
	// closes receives how each WebSocket to this sandbox ended, as the app saw it.
	closes chan error
	dials  atomic.Int64
}

func newFakeSandbox(t testing.TB, id string) *fakeSandbox {
	t.Helper()
	s := &fakeSandbox{id: id, sse: make(chan struct{}), closes: make(chan error, 1024)}
	s.srv = httptest.NewServer(s.handler())
	t.Cleanup(s.srv.Close)
	return s
}

func (s *fakeSandbox) dial(ctx context.Context) (net.Conn, error) {
	s.dials.Add(1)
	var d net.Dialer
	return d.DialContext(ctx, "tcp", s.srv.Listener.Addr().String())
}

func (s *fakeSandbox) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/headers", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Upstream-ID", s.id)
		_ = json.NewEncoder(w).Encode(map[string]any{"header": r.Header, "host": r.Host, "uri": r.RequestURI})
	})
	mux.HandleFunc("/cookies", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Set-Cookie", sessionCookie+"=planted; Path=/; HttpOnly")
		w.Header().Add("Set-Cookie", " "+roleCookie+" =dev; Path=/")
		w.Header().Add("Set-Cookie", "="+sessionCookie+"=nameless; Path=/api/v1")
		w.Header().Add("Set-Cookie", "__Host-"+strings.ToUpper(sessionCookie)+"=prefixed; Secure; Path=/")
		w.Header().Add("Set-Cookie", "__Secure-"+roleCookie+"=dev; Secure")
		w.Header().Add("Set-Cookie", "app=1; Path=/")
		w.Header().Set("X-Paddock-Role", "spoofed")
		w.Header().Set("X-Paddock-Sandbox", "spoofed")
	})
	mux.HandleFunc("/early-hints", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</app.css>; rel=preload")
		w.Header().Set("Set-Cookie", sessionCookie+"=planted; Path=/")
		w.Header().Set("X-Paddock-Role", "spoofed")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Set-Cookie")
		w.Header().Del("X-Paddock-Role")
		w.WriteHeader(http.StatusCreated)
	})
	mux.HandleFunc("/sse", func(w http.ResponseWriter, r *http.Request) {
		// ?type= streams the same lines under another content type (a chunked NDJSON
		// stream, say), which the proxy must not hold back either.
		ct := "text/event-stream"
		if t := r.URL.Query().Get("type"); t != "" {
			ct = t
		}
		w.Header().Set("Content-Type", ct)
		for i := range 5 {
			fmt.Fprintf(w, "data: %d\n\n", i)
			w.(http.Flusher).Flush()
			select {
			case <-s.sse: // the test saw event i: only then comes i+1
			case <-r.Context().Done():
				return
			case <-time.After(10 * time.Second):
				return
			}
		}
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		_, _ = io.Copy(w, io.LimitReader(pattern{}, int64(n)))
	})
	mux.HandleFunc("/ws", s.serveWS)
	mux.HandleFunc("/switch", func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: tunnel\r\n\r\n")
		brw.Flush()
		io.Copy(io.Discard, conn)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Upstream-ID", s.id)
		_, _ = io.Copy(io.Discard, r.Body)
		io.WriteString(w, s.id)
	})
	return mux
}

// serveWS echoes messages, type kept. "who" answers the sandbox's ID; "close CODE
// REASON" closes with that code.
func (s *fakeSandbox) serveWS(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"chat.v2", "chat.v1"}, InsecureSkipVerify: true})
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(64 << 20)
	ctx := context.Background()
	for {
		typ, b, err := c.Read(ctx)
		if err != nil {
			select {
			case s.closes <- err:
			default:
			}
			return
		}
		msg := string(b)
		switch {
		case typ == websocket.MessageText && msg == "who":
			b = []byte(s.id)
		case typ == websocket.MessageText && msg == "subprotocol":
			b = []byte(c.Subprotocol())
		case typ == websocket.MessageText && strings.HasPrefix(msg, "close "):
			var code int
			var reason string
			fmt.Sscanf(msg, "close %d %s", &code, &reason)
			c.Close(websocket.StatusCode(code), reason)
			return
		}
		if err := c.Write(ctx, typ, b); err != nil {
			return
		}
	}
}

// pattern is an endless deterministic byte stream.
type pattern struct{}

func (pattern) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	return len(b), nil
}

func patternSum(n int64) [32]byte {
	h := sha256.New()
	_, _ = io.Copy(h, io.LimitReader(pattern{}, n))
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s
}

// testRouter is a real Router over two fake sandboxes per user: swap exchanges them.
type testRouter struct {
	mu   sync.Mutex
	gen  int64
	live *fakeSandbox
	dev  *fakeSandbox
	err  error
}

func (r *testRouter) Route(_ context.Context, _, role string) (Target, int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return Target{}, 0, r.err
	}
	s := r.live
	if role == api.RoleDev {
		s = r.dev
	}
	if s == nil {
		return Target{}, 0, fmt.Errorf("no %s sandbox: %w", role, errdefs.ErrNotFound)
	}
	return Target{SandboxID: s.id, Role: role, Build: s.build, Dial: s.dial}, r.gen, nil
}

// RouteSandbox reaches one of the two sandboxes by ID, with the role it holds now.
func (r *testRouter) RouteSandbox(_ context.Context, _, id string) (Target, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for role, s := range map[string]*fakeSandbox{api.RoleLive: r.live, api.RoleDev: r.dev} {
		if s != nil && s.id == id {
			return Target{SandboxID: s.id, Role: role, Build: s.build, Dial: s.dial}, nil
		}
	}
	return Target{}, fmt.Errorf("no sandbox %s: %w", id, errdefs.ErrNotFound)
}

// swap promotes dev to live and returns the new generation.
func (r *testRouter) swap() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.live, r.dev = r.dev, r.live
	r.gen++
	return r.gen
}

func (r *testRouter) owner() (string, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.live.id, r.gen
}

// harness is a proxy behind a real HTTP server, as `paddock serve` would mount it: user
// "u1", role from the role cookie, or one sandbox by ID from X-Test-Sandbox (a sandbox's
// own apps host).
type harness struct {
	t      testing.TB
	router *testRouter
	p      *Proxy
	reg    *prometheus.Registry
	front  *httptest.Server
	events chan string
}

func newHarness(t testing.TB, o Options) *harness {
	t.Helper()
	h := &harness{t: t, reg: prometheus.NewRegistry(), events: make(chan string, 16)}
	h.router = &testRouter{live: newFakeSandbox(t, "sb-live"), dev: newFakeSandbox(t, "sb-dev")}
	o.Registerer = h.reg
	o.ReservedCookies = []string{sessionCookie, roleCookie}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	o.Event = func(_ context.Context, user, action string, _ map[string]any) {
		select {
		case h.events <- user + " " + action:
		default:
		}
	}
	p, err := New(h.router, o)
	if err != nil {
		t.Fatal(err)
	}
	h.p = p
	h.front = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		role := api.RoleLive
		if c, err := r.Cookie(roleCookie); err == nil {
			role = c.Value
		}
		p.Serve(w, r, Caller{UserID: "u1", Role: role, SandboxID: r.Header.Get("X-Test-Sandbox")})
	}))
	t.Cleanup(func() {
		h.front.Close()
		p.Close()
	})
	return h
}

func (h *harness) wsURL(path string) string {
	return "ws" + strings.TrimPrefix(h.front.URL, "http") + path
}

func (h *harness) dialWS(ctx context.Context, path string, hdr http.Header) (*websocket.Conn, *http.Response, error) {
	c, res, err := websocket.Dial(ctx, h.wsURL(path), &websocket.DialOptions{HTTPHeader: hdr})
	if c != nil {
		c.SetReadLimit(64 << 20)
	}
	return c, res, err
}

// who asks a WebSocket which sandbox is on the other end.
func who(ctx context.Context, c *websocket.Conn) (string, error) {
	if err := c.Write(ctx, websocket.MessageText, []byte("who")); err != nil {
		return "", err
	}
	_, b, err := c.Read(ctx)
	return string(b), err
}

func decodeError(t testing.TB, r io.Reader) api.ErrorBody {
	t.Helper()
	var e api.Error
	if err := json.NewDecoder(r).Decode(&e); err != nil {
		t.Fatalf("error body is not the API's error shape: %v", err)
	}
	return e.Error
}

// value reads a counter or gauge. (prometheus/testutil would do, but it needs
// github.com/kylelemons/godebug, which go.sum does not pin.)
func value(t testing.TB, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	c.Collect(ch)
	close(ch)
	var sum float64
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		switch {
		case d.Counter != nil:
			sum += d.Counter.GetValue()
		case d.Gauge != nil:
			sum += d.Gauge.GetValue()
		}
	}
	return sum
}
