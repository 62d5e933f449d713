package welcome

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

var testInfo = Info{Sandbox: "sb-welcome", Hostname: "box", Kernel: "Linux 6.18", PID: 42, Started: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Build: "b1"}

func serve(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(Handler(testInfo))
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, srv *httptest.Server, path string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Header.Get(ServedByHeader); got != testInfo.Sandbox {
		t.Errorf("%s %s = %q, want %q", path, ServedByHeader, got, testInfo.Sandbox)
	}
	return resp, string(b)
}

func TestPage(t *testing.T) {
	srv := serve(t)
	_, body := get(t, srv, "/", RoleHeader, `<script>alert(1)</script>`)
	for _, want := range []string{"Your paddock sandbox is running", "sb-welcome", "box", "Linux 6.18", "ws/echo", "WebSocket: connected", "&lt;script&gt;alert(1)&lt;/script&gt;"} {
		if !strings.Contains(body, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	// The page tells the truth about replacing it: the sandbox keeps it running, so an app
	// started by hand on its port loses the race; the user chooses another app instead.
	for _, want := range []string{"paddock app preview", "paddock app set --port 8080 -- COMMAND"} {
		if !strings.Contains(body, want) {
			t.Errorf("page does not say how to replace it: lacks %q", want)
		}
	}
	if strings.Contains(body, "<script>alert(1)") {
		t.Error("the role header reached the page unescaped")
	}
	if strings.Contains(body, "src=") || strings.Contains(body, "href=") {
		t.Error("the page loads external assets")
	}
	if _, body := get(t, srv, "/"); !strings.Contains(body, ">unknown<") {
		t.Error("a request without a role header does not say the role is unknown")
	}
	if resp, _ := get(t, srv, "/nope"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("/nope: %s", resp.Status)
	}
}

func TestAPIInfo(t *testing.T) {
	resp, body := get(t, serve(t), "/api/info", RoleHeader, "viewer")
	var got map[string]any
	if err := json.Unmarshal([]byte(body), &got); err != nil || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%s: %v", body, err)
	}
	want := map[string]any{"sandbox": "sb-welcome", "role": "viewer", "hostname": "box", "kernel": "Linux 6.18", "pid": 42.0, "started_at": "2026-01-02T03:04:05Z", "build": "b1"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("fields %v, want %v", got, want)
	}
}

func TestEcho(t *testing.T) {
	srv := serve(t)
	c, resp, err := websocket.Dial(t.Context(), "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws/echo", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	if resp.Header.Get(ServedByHeader) != testInfo.Sandbox {
		t.Errorf("upgrade response lacks %s", ServedByHeader)
	}
	for _, m := range []struct {
		typ  websocket.MessageType
		data string
	}{{websocket.MessageText, "hello"}, {websocket.MessageBinary, "\x00\x01\x02"}, {websocket.MessageText, strings.Repeat("z", 200_000)}} {
		if err := c.Write(t.Context(), m.typ, []byte(m.data)); err != nil {
			t.Fatal(err)
		}
		typ, got, err := c.Read(t.Context())
		if err != nil || typ != m.typ || string(got) != m.data {
			t.Fatalf("echo: %v %d bytes, %v", typ, len(got), err)
		}
	}
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatal(err)
	}
}

// Events arrive one by one as they are sent, not all at the end.
func TestSSE(t *testing.T) {
	srv := serve(t)
	resp, err := srv.Client().Get(srv.URL + "/sse?n=3&interval=200ms")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("Content-Type %q", resp.Header.Get("Content-Type"))
	}
	r := bufio.NewReader(resp.Body)
	start := time.Now()
	var events []string
	for {
		line, err := r.ReadString('\n')
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "data: ") {
			if len(events) == 0 && time.Since(start) > 150*time.Millisecond {
				t.Error("the first event was held back")
			}
			events = append(events, line)
		}
	}
	if len(events) != 3 || !strings.Contains(events[2], `"sandbox":"sb-welcome"`) || !strings.Contains(events[2], `"seq":2`) {
		t.Fatalf("events %q", events)
	}
}

func TestStream(t *testing.T) {
	srv := serve(t)
	resp, body := get(t, srv, "/stream?bytes=100000")
	if resp.ContentLength != 100000 || len(body) != 100000 {
		t.Fatalf("Content-Length %d, %d bytes", resp.ContentLength, len(body))
	}
	for i := range len(body) {
		if body[i] != Pattern(int64(i)) {
			t.Fatalf("byte %d is %d, want %d", i, body[i], Pattern(int64(i)))
		}
	}
	for _, q := range []string{"/stream?bytes=-1", "/stream?bytes=99999999999", "/sse?n=x", "/sse?n=100001", "/sse?interval=-1s", "/sse?interval=2h"} {
		if resp, _ := get(t, srv, q); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: %s, want 400", q, resp.Status)
		}
	}
}

// Query parameters come from anyone the sandbox is shared with: whatever they say, the
// parsers stay within bounds.
func FuzzParams(f *testing.F) {
	for _, s := range []string{"n=3&interval=10ms", "bytes=100", "n=-1", "interval=1e9h", "bytes=9223372036854775807"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		if n, d, err := eventParams(q); err == nil && (n < 0 || n > maxEvents || d < 0 || d > maxInterval) {
			t.Fatalf("eventParams(%q) = %d, %s", raw, n, d)
		}
		if n, err := streamParams(q); err == nil && (n < 0 || n > maxStreamBytes) {
			t.Fatalf("streamParams(%q) = %d", raw, n)
		}
	})
}
