package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
)

// servedBy asks the role's app who it is (the welcome app's /api/info names its sandbox).
func servedBy(c *servertest.Client, hc *http.Client) (string, error) {
	c.Handoff(c.AppURL("live"))
	req, _ := http.NewRequest("GET", c.AppURL("live")+"/api/info", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var info struct {
		Sandbox string `json:"sandbox"`
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return "", errors.New(resp.Status + " " + string(b))
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		return "", err
	}
	if h := resp.Header.Get(api.HeaderSandbox); h != info.Sandbox {
		return "", errors.New("header names " + h + ", body " + info.Sandbox)
	}
	return info.Sandbox, nil
}

func dialEcho(ctx context.Context, c *servertest.Client) (*websocket.Conn, string, error) {
	c.Handoff(c.AppURL("live"))
	ws, resp, err := websocket.Dial(ctx, c.AppURL("live")+"/ws/echo", &websocket.DialOptions{HTTPClient: c.HTTP})
	if err != nil {
		return nil, "", err
	}
	return ws, resp.Header.Get(api.HeaderSandbox), nil
}

// Promotion is a pointer swap with single ownership: under concurrent HTTP load and with
// WebSockets open, every request that starts after a swap is answered by the new owner,
// no request fails, and the WebSockets held by the old owner are closed with 4001 and
// reconnect to the new one.
func TestPromotionSingleOwnership(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var roles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	owner := atomic.Value{} // the live sandbox since the last acknowledged swap
	owner.Store(roles.Live.ID)
	var swapping atomic.Bool // a swap is in flight: either owner is acceptable

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ws, first, err := dialEcho(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	if first != roles.Live.ID {
		t.Fatalf("WebSocket served by %q, want the live sandbox %s", first, roles.Live.ID)
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var requests, failures, wrong atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				stable := !swapping.Load()
				want := owner.Load().(string)
				got, err := servedBy(alice, alice.HTTP)
				requests.Add(1)
				switch {
				case err != nil:
					failures.Add(1)
					t.Errorf("request failed during promotions: %v", err)
				case stable && !swapping.Load() && got != want && got != owner.Load().(string):
					wrong.Add(1)
					t.Errorf("served by %s, but the live owner was %s throughout", got, want)
				}
			}
		}()
	}
	const swaps = 6
	for i := range swaps {
		time.Sleep(150 * time.Millisecond)
		swapping.Store(true)
		var after api.Roles
		alice.MustJSON("POST", "/api/v1/promote", nil, http.StatusOK, &after)
		owner.Store(after.Live.ID)
		swapping.Store(false)
		if after.Generation != int64(i+1) {
			t.Errorf("generation %d after %d swaps", after.Generation, i+1)
		}
		// The WebSocket held by the old owner is closed with the reconnect code...
		_, _, err := ws.Read(ctx)
		if code := websocket.CloseStatus(err); code != api.CloseOwnerChanged {
			t.Fatalf("swap %d: the old owner's WebSocket ended with %v (code %d), want %d", i+1, err, code, api.CloseOwnerChanged)
		}
		// ...and a reconnect reaches the new owner.
		var served string
		ws, served, err = dialEcho(ctx, alice)
		if err != nil || served != after.Live.ID {
			t.Fatalf("reconnect after swap %d: %q, %v; want %s", i+1, served, err, after.Live.ID)
		}
		if err := ws.Write(ctx, websocket.MessageText, []byte("ping")); err != nil {
			t.Fatal(err)
		}
		if _, msg, err := ws.Read(ctx); err != nil || string(msg) != "ping" {
			t.Fatalf("echo after reconnect: %q, %v", msg, err)
		}
	}
	close(stop)
	wg.Wait()
	ws.Close(websocket.StatusNormalClosure, "")
	t.Logf("%d requests during %d promotions: %d failed, %d served by the wrong role", requests.Load(), swaps, failures.Load(), wrong.Load())
	if requests.Load() < 50 {
		t.Errorf("only %d requests: the load was too light to show anything", requests.Load())
	}
	// The dev role reaches the other sandbox, and says so.
	alice.MustJSON("POST", "/auth/role", api.RoleRequest{Role: api.RoleDev}, http.StatusNoContent, nil)
	var now api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &now)
	// The control plane sends the browser to the dev role: an app path to the dev entry
	// point, which serves it, and / to the dev sandbox's desktop (through the handoff).
	noFollow := *alice.HTTP
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for _, tc := range []struct{ path, want string }{
		{"/notes", alice.AppURL("dev") + "/notes"},
		{"/", "desktop-" + now.Dev.ID + "."},
	} {
		req, _ := http.NewRequest("GET", alice.Base+tc.path, nil)
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		if u, err := url.Parse(loc); err == nil && u.Path == "/auth/handoff" {
			loc = u.Query().Get("to")
		}
		if resp.StatusCode != http.StatusSeeOther || !strings.Contains(loc, tc.want) {
			t.Errorf("GET %s with the dev role: %d to %q, want 303 to %s", tc.path, resp.StatusCode, loc, tc.want)
		}
	}
	resp := alice.AppAt(alice.AppURL("dev"), "GET", "/", nil)
	resp.Body.Close()
	if resp.Header.Get(api.HeaderRole) != "dev" || resp.Header.Get(api.HeaderSandbox) != now.Dev.ID {
		t.Errorf("dev role: headers %q %q, want dev %s", resp.Header.Get(api.HeaderRole), resp.Header.Get(api.HeaderSandbox), now.Dev.ID)
	}
	var evs api.EventList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/events?action=roles.promote", nil), http.StatusOK, &evs)
	if len(evs.Events) != swaps {
		t.Errorf("%d promotion events, want %d", len(evs.Events), swaps)
	}
}

// Restarting or stopping the live sandbox through the API does not break the role: the
// next request reaches the restarted sandbox (a stopped one is started again on use).
func TestRoleSandboxRestartKeepsServing(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var roles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	if got, err := servedBy(alice, alice.HTTP); err != nil || got != roles.Live.ID {
		t.Fatalf("before: %q, %v", got, err)
	}
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+roles.Live.ID+"/restart", nil), http.StatusOK, nil)
	if got, err := servedBy(alice, alice.HTTP); err != nil || got != roles.Live.ID {
		t.Errorf("after restart: %q, %v", got, err)
	}
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+roles.Live.ID+"/stop", nil), http.StatusOK, nil)
	if got, err := servedBy(alice, alice.HTTP); err != nil || got != roles.Live.ID {
		t.Errorf("after stop, the next use starts it again: %q, %v", got, err)
	}
}

// The app is supervised: killed, it is restarted by the agent and serves again.
func TestCrashedAppIsRestarted(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var roles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	if _, err := servedBy(alice, alice.HTTP); err != nil {
		t.Fatal(err)
	}
	var res api.ExecResult
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+roles.Live.ID+"/exec",
		api.ExecRequest{Argv: []string{"sh", "-c", "kill -9 $(pgrep -f '^[^ ]*paddock-agent welcome')"}}), http.StatusOK, &res)
	if res.ExitCode != 0 {
		t.Fatalf("kill the app: %+v", res)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, err := servedBy(alice, alice.HTTP)
		if err == nil && got == roles.Live.ID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the app did not come back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
