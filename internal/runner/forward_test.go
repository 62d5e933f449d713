package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/paddockhq/paddock/internal/agent/welcome"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/testenv"
	"github.com/paddockhq/paddock/internal/tunnel"
	"github.com/paddockhq/paddock/internal/wire"
)

// The control plane's path to an app in a sandbox, end to end: a container sandbox runs the
// welcome app on its loopback, and plain HTTP and WebSocket clients reach it through tunnels
// over the agent channel, with no port of the host's involved.
func TestForwardWelcomeApp(t *testing.T) {
	for _, rt := range []string{"runc", "runsc"} {
		t.Run(rt, func(t *testing.T) { testForwardWelcomeApp(t, rt) })
	}
}

func testForwardWelcomeApp(t *testing.T, rt string) {
	testenv.RequireRoot(t)
	r := runner.New(testenv.Config(t), testenv.Logger(t))
	sb, err := r.Create(tctx(t), runner.Spec{User: "fwd", Runtime: rt, Main: wire.WelcomeCommand(wire.AgentPath, 8080)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(context.Background()); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	waitListening(t, sb, 8080)
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		return tunnel.Dial(ctx, sb.ChannelConn(), 8080)
	}
	client := &http.Client{Transport: &http.Transport{DialContext: dial}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()

	page := getBody(t, client, "/")
	if !strings.Contains(page, "Your paddock sandbox is running") || !strings.Contains(page, sb.ID) {
		t.Fatalf("GET / does not name the sandbox:\n%s", page)
	}
	var info struct{ Sandbox, Role, Kernel string }
	if err := json.Unmarshal([]byte(getBody(t, client, "/api/info")), &info); err != nil {
		t.Fatal(err)
	}
	if info.Sandbox != sb.ID || info.Role != "owner" || info.Kernel == "" {
		t.Fatalf("/api/info = %+v, want sandbox %s as owner", info, sb.ID)
	}

	ws, _, err := websocket.Dial(tctx(t), "ws://sandbox/ws/echo", &websocket.DialOptions{HTTPClient: client, HTTPHeader: http.Header{"Host": {"sandbox"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	ws.SetReadLimit(1 << 20)
	for _, msg := range []string{"hello from the host", strings.Repeat("m", 100_000)} {
		if err := ws.Write(tctx(t), websocket.MessageText, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		if _, got, err := ws.Read(tctx(t)); err != nil || string(got) != msg {
			t.Fatalf("WebSocket echo of %d bytes: %d bytes, %v", len(msg), len(got), err)
		}
	}
	if err := ws.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatal(err)
	}
}

// waitListening waits for the sandbox's main command to listen on port.
func waitListening(t *testing.T, sb *runner.Sandbox, port int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := tunnel.Dial(tctx(t), sb.ChannelConn(), port)
		if err == nil {
			c.Close()
			return
		}
		if !errors.Is(err, errdefs.ErrUnavailable) || time.Now().After(deadline) {
			t.Fatalf("port %d in sandbox %s: %v", port, sb.ID, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func getBody(t *testing.T, client *http.Client, path string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(tctx(t), "GET", "http://sandbox"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(welcome.RoleHeader, "owner")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", path, resp.Status, err)
	}
	if got := resp.Header.Get(welcome.ServedByHeader); got != "" && !strings.HasPrefix(got, "sb-") {
		t.Errorf("%s: %q", welcome.ServedByHeader, got)
	}
	return string(b)
}
