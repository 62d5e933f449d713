package bench

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestPeerMissing: a peer whose program is not installed keeps its rows, which say why
// they have no figures, and its samples are never taken.
func TestPeerMissing(t *testing.T) {
	p, path := lookPeer("nope", "paddock-no-such-peer")
	if path != "" || !strings.Contains(p.missing, "paddock-no-such-peer is not installed") {
		t.Fatalf("lookPeer: %q, %q", path, p.missing)
	}
	ran := false
	if err := p.round(func() error { ran = true; return nil })(); err != nil || ran {
		t.Fatalf("round of a missing peer: ran %v, %v", ran, err)
	}
	tb := &Table{Title: "t", Rows: []Row{p.row(Row{Name: "through nope", Unit: "ms", Summary: Summary{N: 1, P50: 1}, Ratio: "1.00×"})}}
	var md bytes.Buffer
	tb.WriteMarkdown(&md)
	if !strings.Contains(md.String(), "| through nope | 0 | not measured: paddock-no-such-peer is not installed") || strings.Contains(md.String(), "1.00×") {
		t.Errorf("markdown:\n%s", md.String())
	}
}

// TestPeerFailsWhileMeasured: a peer whose sample fails is measured no more and its rows
// say why, without failing the table.
func TestPeerFailsWhileMeasured(t *testing.T) {
	p := &peer{name: "flaky"}
	n := 0
	fn := p.round(func() error { n++; return context.DeadlineExceeded })
	for range 3 {
		if err := fn(); err != nil {
			t.Fatal(err)
		}
	}
	if n != 1 || !strings.Contains(p.missing, "failed while measured") {
		t.Errorf("ran %d times, missing %q", n, p.missing)
	}
	if r := p.row(Row{Name: "x", Summary: Summary{N: 2, P50: 3}}); r.N != 0 || r.Missing == "" {
		t.Errorf("row %+v", r)
	}
}

// TestDaemonExitsAsItStarts: a peer's server that exits before it is ready is an error
// that quotes its output.
func TestDaemonExitsAsItStarts(t *testing.T) {
	dir := t.TempDir()
	start := time.Now()
	_, err := startDaemon(context.Background(), "sh", dir+"/out.log", []string{"/bin/sh", "-c", "echo bad config >&2; exit 3"},
		dialReady("127.0.0.1:1"))
	if err == nil || !strings.Contains(err.Error(), "exited as it started") || !strings.Contains(err.Error(), "bad config") {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) > 20*time.Second {
		t.Errorf("took %s to notice the exit", time.Since(start))
	}
}

// TestDaemonStopsItsGroup: Close ends the daemon and what it started in its group.
func TestDaemonStopsItsGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child")
	ready := func(context.Context) error {
		_, err := os.Stat(pidFile)
		return err
	}
	d, err := startDaemon(context.Background(), "sh", filepath.Join(dir, "out.log"),
		[]string{"/bin/sh", "-c", "sleep 600 & echo $! >" + pidFile + ".new && mv " + pidFile + ".new " + pidFile + "; wait"}, ready)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	child := strings.TrimSpace(string(b))
	d.Close()
	select {
	case <-d.exited:
	default:
		t.Fatal("the daemon still runs after Close")
	}
	// The child was sent SIGKILL; it is gone, or a zombie its new parent has yet to reap.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		stat, err := os.ReadFile("/proc/" + child + "/stat")
		if err != nil || strings.Contains(string(stat), ") Z ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon's child %s still runs after Close: %s", child, stat)
		}
	}
}

// TestReverseProxyPeersAsConfigured: nginx and haproxy, as the bench configures them, drop
// Cookie and Authorization before the app and keep their connections to it alive, as
// table 5 says they do.
func TestReverseProxyPeersAsConfigured(t *testing.T) {
	var (
		mu    sync.Mutex
		conns int
		seen  []http.Header
	)
	app := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	app.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	app.Start()
	defer app.Close()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	e := &Env{Dir: dir}
	for _, name := range []string{"nginx", "haproxy"} {
		t.Run(name, func(t *testing.T) {
			p := e.startReverseProxy(context.Background(), name, strings.TrimPrefix(app.URL, "http://"))
			defer p.Close()
			if _, err := exec.LookPath(name); err != nil {
				t.Skipf("%s is not installed here: %s", name, p.missing)
			}
			if p.missing != "" {
				t.Fatal(p.missing)
			}
			mu.Lock()
			conns, seen = 0, nil
			mu.Unlock()
			const n = 20
			for range n {
				req, _ := http.NewRequest("GET", p.URL+"/api/info", nil)
				req.Header.Set("Cookie", "paddock_session=secret")
				req.Header.Set("Authorization", "Bearer secret")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || string(b) != "ok" {
					t.Fatalf("%s: %s %q", name, resp.Status, b)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != n {
				t.Fatalf("the app saw %d requests, want %d", len(seen), n)
			}
			for _, h := range seen {
				if h.Get("Cookie") != "" || h.Get("Authorization") != "" {
					t.Fatalf("the app got Cookie %q, Authorization %q", h.Get("Cookie"), h.Get("Authorization"))
				}
			}
			// Serial requests over kept-alive connections: one or two, never one each.
			if conns > 2 {
				t.Errorf("%d connections to the app for %d serial requests", conns, n)
			}
		})
	}
}

// TestBestPeerTarget: a target set by peers is the best measured one's; a peer that was not
// measured sets none, and with no peer measured the target is not judged.
func TestBestPeerTarget(t *testing.T) {
	rates := map[string]float64{"squid": 100, "tinyproxy": 300, "gone": 900}
	value := func(name string) float64 { return rates[name] }
	b := bestPeer([]*peer{{name: "squid"}, {name: "tinyproxy"}, {name: "gone", missing: "not installed"}}, value)
	if b.name != "tinyproxy" || b.value != 300 {
		t.Fatalf("best = %+v, want tinyproxy at 300", b)
	}
	if got := b.target(1000); got != "≥ the best peer's ratio (tinyproxy, 0.30×)" {
		t.Errorf("target %q", got)
	}
	if b.met(300) != "yes" || b.met(299) != "**no**" || b.word(299) != "**not met**" {
		t.Errorf("met(300) %q, met(299) %q, word(299) %q", b.met(300), b.met(299), b.word(299))
	}
	none := bestPeer([]*peer{{name: "gone", missing: "not installed"}}, value)
	if none.met(1) != "—" || !strings.Contains(none.word(1), "not judged") {
		t.Errorf("no peer measured: met %q, word %q", none.met(1), none.word(1))
	}
}

// TestNginxProxiesWebSockets: nginx, as the bench configures it, passes a WebSocket upgrade
// to the app (table 6), still without the client's Cookie.
func TestNginxProxiesWebSockets(t *testing.T) {
	if _, err := exec.LookPath("nginx"); err != nil {
		t.Skip("nginx is not installed here (scripts/setup.sh installs it)")
	}
	cookies := make(chan string, 1)
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cookies <- r.Header.Get("Cookie")
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		typ, b, err := ws.Read(r.Context())
		if err == nil {
			_ = ws.Write(r.Context(), typ, b)
		}
	}))
	defer app.Close()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	e := &Env{Dir: dir}
	p := e.startReverseProxy(context.Background(), "nginx", strings.TrimPrefix(app.URL, "http://"))
	defer p.Close()
	if p.missing != "" {
		t.Fatal(p.missing)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, p.URL+"/ws/echo", &websocket.DialOptions{HTTPHeader: http.Header{"Cookie": {"paddock_session=secret"}}})
	if err != nil {
		t.Fatalf("dial through nginx: %v", err)
	}
	defer ws.CloseNow()
	if err := ws.Write(ctx, websocket.MessageBinary, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, b, err := ws.Read(ctx); err != nil || string(b) != "hi" {
		t.Fatalf("echo %q, %v", b, err)
	}
	if c := <-cookies; c != "" {
		t.Errorf("the app got Cookie %q", c)
	}
}

// TestParseWrk: wrk's report gives the rate and the 50% and 99% latencies in ms; non-2xx
// answers and socket errors fail the round.
func TestParseWrk(t *testing.T) {
	report := `Running 3s test @ http://127.0.0.1:8080/api/info
  2 threads and 8 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   301.23us  200.01us   5.12ms   90.00%
    Req/Sec    12.34k     1.01k   14.00k    70.00%
  Latency Distribution
     50%  250.00us
     75%  300.00us
     90%  400.00us
     99%    1.50ms
  73856 requests in 3.00s, 12.34MB read
Requests/sec:  24618.67
Transfer/sec:      4.11MB
`
	s, err := parseWrk(report)
	if err != nil {
		t.Fatal(err)
	}
	if s.rate != 24618.67 || s.p50 != 0.25 || s.p99 != 1.5 {
		t.Errorf("parsed %+v", s)
	}
	for _, bad := range []string{
		strings.Replace(report, "Requests/sec", "  Non-2xx or 3xx responses: 12\nRequests/sec", 1),
		strings.Replace(report, "Requests/sec", "  Socket errors: connect 0, read 3, write 0, timeout 0\nRequests/sec", 1),
		strings.Replace(report, "     99%    1.50ms\n", "", 1),
		"unable to connect to 127.0.0.1:1 Connection refused",
	} {
		if _, err := parseWrk(bad); err == nil {
			t.Errorf("no error for:\n%s", bad)
		}
	}
}

// TestWrkRound: wrk, as table 5 runs it, loads a server with the Host and Cookie headers
// it is given, and its report parses.
func TestWrkRound(t *testing.T) {
	w := newWrk()
	if w.missing != "" {
		t.Skip(w.missing)
	}
	var mu sync.Mutex
	var hosts, cookies []string
	app := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if len(hosts) < 10 {
			hosts, cookies = append(hosts, r.Host), append(cookies, r.Header.Get("Cookie"))
		}
		mu.Unlock()
		_, _ = io.WriteString(rw, "ok")
	}))
	defer app.Close()
	s, err := w.round(context.Background(), app.URL+"/api/info", "live-x.apps.localhost:1", "a=b", 2, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if s.rate <= 0 || s.p50 <= 0 || s.p99 < s.p50 {
		t.Errorf("stats %+v", s)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hosts) == 0 || hosts[0] != "live-x.apps.localhost:1" || cookies[0] != "a=b" {
		t.Errorf("the server saw Host %q, Cookie %q", hosts, cookies)
	}
}
