package server_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
)

// A WebSocket through the proxy ends when the app holding it dies (SIGKILL): the browser's
// client learns it at once and reconnects, rather than waiting on a socket nobody holds.
func TestWebSocketEndsWhenTheAppDies(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var roles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ws, _, err := dialEcho(ctx, alice)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if err := ws.Write(ctx, websocket.MessageText, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := ws.Read(ctx); err != nil || string(msg) != "ping" {
		t.Fatalf("echo: %q, %v", msg, err)
	}
	var res api.ExecResult
	alice.MustJSON("POST", "/api/v1/sandboxes/"+roles.Live.ID+"/exec", api.ExecRequest{Argv: []string{"pkill", "-KILL", "-f", "paddock-agent welcome"}}, http.StatusOK, &res)
	if res.ExitCode != 0 {
		t.Fatalf("pkill found no app: %+v", res)
	}
	_, _, err = ws.Read(ctx)
	if ctx.Err() != nil {
		t.Fatal("the WebSocket was not closed when the app died")
	}
	if code := websocket.CloseStatus(err); code != websocket.StatusBadGateway {
		t.Fatalf("the WebSocket ended with %v (code %d), want %d (bad gateway)", err, code, websocket.StatusBadGateway)
	}
}
