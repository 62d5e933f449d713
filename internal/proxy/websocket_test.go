package proxy

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/paddockhq/paddock/internal/api"
)

func dialOK(t *testing.T, h *harness, path string, opts ...func(*websocket.DialOptions)) *websocket.Conn {
	t.Helper()
	o := &websocket.DialOptions{}
	for _, f := range opts {
		f(o)
	}
	c, _, err := websocket.Dial(t.Context(), h.wsURL(path), o)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(64 << 20)
	t.Cleanup(func() { c.CloseNow() })
	return c
}

// closeOf reads until c closes and returns the close error.
func closeOf(t *testing.T, c *websocket.Conn) websocket.CloseError {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		_, _, err := c.Read(ctx)
		if err == nil {
			continue
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) {
			t.Fatalf("connection ended without a close frame: %v", err)
		}
		return ce
	}
}

func TestWebSocketEcho(t *testing.T) {
	h := newHarness(t, Options{})
	c := dialOK(t, h, "/ws")
	ctx := t.Context()
	msgs := []struct {
		typ websocket.MessageType
		b   []byte
	}{
		{websocket.MessageText, []byte("hello")},
		{websocket.MessageBinary, []byte{0, 1, 2, 0xff, 0xfe}},
		{websocket.MessageText, []byte("")},
		{websocket.MessageBinary, bytes.Repeat([]byte{7}, 4<<20)},
	}
	for _, m := range msgs {
		if err := c.Write(ctx, m.typ, m.b); err != nil {
			t.Fatal(err)
		}
		typ, b, err := c.Read(ctx)
		if err != nil || typ != m.typ || !bytes.Equal(b, m.b) {
			t.Fatalf("echo of %v (%d bytes): got %v (%d bytes), err %v", m.typ, len(m.b), typ, len(b), err)
		}
	}
	if got := value(t, h.p.m.websockets); got != 1 {
		t.Errorf("websockets gauge = %v, want 1", got)
	}
	c.Close(websocket.StatusNormalClosure, "")
	waitFor(t, func() bool { return value(t, h.p.m.websockets) == 0 })
}

func TestWebSocketSubprotocol(t *testing.T) {
	h := newHarness(t, Options{})
	c := dialOK(t, h, "/ws", func(o *websocket.DialOptions) { o.Subprotocols = []string{"chat.v1", "chat.v2"} })
	if c.Subprotocol() != "chat.v2" {
		t.Errorf("client got subprotocol %q; the app prefers chat.v2", c.Subprotocol())
	}
	if err := c.Write(t.Context(), websocket.MessageText, []byte("subprotocol")); err != nil {
		t.Fatal(err)
	}
	if _, b, err := c.Read(t.Context()); err != nil || string(b) != "chat.v2" {
		t.Errorf("the app negotiated %q, %v", b, err)
	}
}

func TestWebSocketCloseCodes(t *testing.T) {
	t.Run("from the app", func(t *testing.T) {
		h := newHarness(t, Options{})
		c := dialOK(t, h, "/ws")
		if err := c.Write(t.Context(), websocket.MessageText, []byte("close 4000 bye")); err != nil {
			t.Fatal(err)
		}
		if ce := closeOf(t, c); ce.Code != 4000 || ce.Reason != "bye" {
			t.Errorf("client saw %v %q, want 4000 bye", ce.Code, ce.Reason)
		}
	})
	t.Run("from the client", func(t *testing.T) {
		h := newHarness(t, Options{})
		c := dialOK(t, h, "/ws")
		if _, err := who(t.Context(), c); err != nil {
			t.Fatal(err)
		}
		c.Close(4003, "client bye")
		select {
		case err := <-h.router.live.closes:
			var ce websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != 4003 || ce.Reason != "client bye" {
				t.Errorf("app saw %v, want 4003 client bye", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the app never saw the close")
		}
	})
	t.Run("message too big", func(t *testing.T) {
		h := newHarness(t, Options{MaxMessageBytes: 1024})
		c := dialOK(t, h, "/ws")
		_ = c.Write(t.Context(), websocket.MessageBinary, make([]byte, 4096))
		if ce := closeOf(t, c); ce.Code != websocket.StatusMessageTooBig {
			t.Errorf("client saw %v, want 1009", ce.Code)
		}
	})
}

func TestWebSocketRefusedWhenNotAHandshake(t *testing.T) {
	h := newHarness(t, Options{})
	req, _ := http.NewRequest("GET", h.front.URL+"/ws", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if e := decodeError(t, res.Body); res.StatusCode != 400 || e.Code != api.CodeInvalidArgument {
		t.Errorf("%d %+v", res.StatusCode, e)
	}
}

func TestOwnerChangedClosesOldOwner(t *testing.T) {
	h := newHarness(t, Options{})
	ctx := t.Context()
	old := dialOK(t, h, "/ws")
	if id, err := who(ctx, old); err != nil || id != "sb-live" {
		t.Fatalf("first owner %q, %v", id, err)
	}
	devWS := dialOK(t, h, "/ws", func(o *websocket.DialOptions) {
		o.HTTPHeader = http.Header{"Cookie": {roleCookie + "=dev"}}
	})
	h.p.OwnerChanged("u1", h.router.swap())
	if ce := closeOf(t, old); ce.Code != api.CloseOwnerChanged || ce.Reason != "owner changed: reconnect" {
		t.Errorf("old owner's WebSocket closed with %v %q", ce.Code, ce.Reason)
	}
	if ce := closeOf(t, devWS); ce.Code != api.CloseOwnerChanged {
		t.Errorf("the dev role's WebSocket closed with %v", ce.Code)
	}
	c := dialOK(t, h, "/ws")
	if id, err := who(ctx, c); err != nil || id != "sb-dev" {
		t.Errorf("after the swap the live role reached %q, %v; want sb-dev", id, err)
	}
	if got := value(t, h.p.m.wsCloses.WithLabelValues(reasonOwnerChanged)); got != 2 {
		t.Errorf("closes{owner_changed} = %v, want 2", got)
	}
	// A stale or repeated generation closes nothing new.
	h.p.OwnerChanged("u1", 1)
	if id, err := who(ctx, c); err != nil || id != "sb-dev" {
		t.Errorf("a repeated OwnerChanged closed a current WebSocket: %v", err)
	}
}

// A sandbox's own host routes by ID: a swap of roles moves nothing there (its WebSockets
// stay open, its answers say the role it holds now), and the sandbox's end closes them.
func TestSandboxRoute(t *testing.T) {
	h := newHarness(t, Options{})
	ctx := t.Context()
	bySandbox := func(id string) func(*websocket.DialOptions) {
		return func(o *websocket.DialOptions) { o.HTTPHeader = http.Header{"X-Test-Sandbox": {id}} }
	}
	c := dialOK(t, h, "/ws", bySandbox("sb-live"))
	h.p.OwnerChanged("u1", h.router.swap())
	if id, err := who(ctx, c); err != nil || id != "sb-live" {
		t.Fatalf("after a swap the sandbox's own WebSocket answered %q, %v; want sb-live, still open", id, err)
	}
	req := newRequest(t, "GET", h.front.URL+"/headers")
	req.Header.Set("X-Test-Sandbox", "sb-live")
	res := get(t, req)
	res.Body.Close()
	if res.Header.Get(api.HeaderSandbox) != "sb-live" || res.Header.Get(api.HeaderRole) != api.RoleDev {
		t.Errorf("sb-live's host after the swap: sandbox %q role %q, want sb-live dev", res.Header.Get(api.HeaderSandbox), res.Header.Get(api.HeaderRole))
	}
	req = newRequest(t, "GET", h.front.URL+"/")
	req.Header.Set("X-Test-Sandbox", "sb-nope")
	if res := get(t, req); res.StatusCode != http.StatusNotFound {
		t.Errorf("an unknown sandbox: %d, want 404", res.StatusCode)
	}
	h.p.SandboxGone("sb-live")
	if ce := closeOf(t, c); ce.Code != api.CloseOwnerGone {
		t.Errorf("closed with %v, want 4002", ce.Code)
	}
}

// TestRegistrationRace: the WebSocket routes before the swap, and the swap's sweep runs
// before it registers. It must still be closed with 4001.
func TestRegistrationRace(t *testing.T) {
	h := newHarness(t, Options{})
	fired := false
	h.p.beforeRegister = func() {
		if !fired {
			fired = true
			h.p.OwnerChanged("u1", h.router.swap())
		}
	}
	c := dialOK(t, h, "/ws")
	if ce := closeOf(t, c); ce.Code != api.CloseOwnerChanged {
		t.Errorf("late registration closed with %v, want 4001", ce.Code)
	}
	c2 := dialOK(t, h, "/ws")
	if id, err := who(t.Context(), c2); err != nil || id != "sb-dev" {
		t.Errorf("reconnect reached %q, %v", id, err)
	}
}

func TestSandboxGone(t *testing.T) {
	h := newHarness(t, Options{})
	c := dialOK(t, h, "/ws")
	if _, err := who(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	other := dialOK(t, h, "/ws", func(o *websocket.DialOptions) {
		o.HTTPHeader = http.Header{"Cookie": {roleCookie + "=dev"}}
	})
	h.p.SandboxGone("sb-live")
	if ce := closeOf(t, c); ce.Code != api.CloseOwnerGone {
		t.Errorf("closed with %v, want 4002", ce.Code)
	}
	if id, err := who(t.Context(), other); err != nil || id != "sb-dev" {
		t.Errorf("another sandbox's WebSocket was hit: %q %v", id, err)
	}
}

func TestReconnectStorm(t *testing.T) {
	h := newHarness(t, Options{ReconnectLimit: 3, ReconnectWindow: time.Minute})
	for range 3 {
		c := dialOK(t, h, "/ws")
		c.Close(websocket.StatusNormalClosure, "")
	}
	for i := range 2 {
		_, res, err := h.dialWS(t.Context(), "/ws", nil)
		if err == nil || res == nil || res.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("attempt %d over the limit: %v", 4+i, err)
		}
		if ra := res.Header.Get("Retry-After"); ra == "" || ra == "0" {
			t.Errorf("Retry-After = %q", ra)
		}
	}
	if got := value(t, h.p.m.storms); got != 1 {
		t.Errorf("reconnect storms = %v, want 1 (once per window)", got)
	}
	if got := value(t, h.p.m.requests.WithLabelValues("live", "429")); got != 2 {
		t.Errorf("requests{429} = %v, want 2", got)
	}
	if ev := <-h.events; ev != "u1 proxy.reconnect_storm" {
		t.Errorf("event %q", ev)
	}
	select {
	case ev := <-h.events:
		t.Errorf("a second event in one window: %q", ev)
	default:
	}
	// Plain HTTP is not rate limited.
	res, err := http.Get(h.front.URL + "/")
	if err != nil || res.StatusCode != 200 {
		t.Errorf("HTTP during a storm: %v %v", res, err)
	}
	res.Body.Close()
}

func TestStormDetectorWindowSlides(t *testing.T) {
	now := time.Unix(1000, 0)
	d := newStormDetector(10*time.Second, 2, func() time.Time { return now })
	steps := []struct {
		advance         time.Duration
		ok, report      bool
		retryAtMostSecs float64
	}{
		{0, true, false, 0},
		{time.Second, true, false, 0},
		{time.Second, false, true, 9},
		{time.Second, false, false, 8},
		{7 * time.Second, true, false, 0}, // the first attempt left the window
		{0, false, false, 1},
		{10 * time.Second, true, false, 0},
	}
	for i, s := range steps {
		now = now.Add(s.advance)
		ok, retry, report := d.allow("u")
		if ok != s.ok || report != s.report || retry.Seconds() > s.retryAtMostSecs {
			t.Errorf("step %d: ok %v report %v retry %v; want %v %v ≤%vs", i, ok, report, retry, s.ok, s.report, s.retryAtMostSecs)
		}
	}
}

func TestCloseClosesWebSockets(t *testing.T) {
	h := newHarness(t, Options{})
	c := dialOK(t, h, "/ws")
	if _, err := who(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	go h.p.Close()
	if ce := closeOf(t, c); ce.Code != websocket.StatusGoingAway {
		t.Errorf("closed with %v, want 1001", ce.Code)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var _ = strings.Contains
