package server_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
)

// A control plane that dies (here: stopped without a shutdown, its sandboxes left running)
// loses nothing acknowledged: the next one adopts the running sandboxes, accounts,
// sessions and tokens still work, and the roles point where they pointed. A sandbox that
// cannot be adopted (runsc: its channel died with the old process) is marked lost, and can
// be started again or deleted.
func TestRestartAdoptsSandboxes(t *testing.T) {
	first := servertest.Start(t, func(c *server.Config) { c.Quota.Sandboxes = 5 })
	alice := first.Register(t, "alice")
	var roles api.Roles
	alice.MustJSON("POST", "/api/v1/promote", nil, http.StatusOK, &roles)
	var plain, gvisor api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "plain"}), http.StatusCreated, &plain)
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "gvisor", Runtime: "runsc"}), http.StatusCreated, &gvisor)
	if gvisor.State != api.StateRunning {
		t.Fatalf("runsc sandbox: %+v", gvisor)
	}
	execIn(t, alice, plain.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo before > f"}})
	first.Stop(false)

	second := servertest.StartWith(t, first.Config)
	alice.Base = second.URL
	// The session cookie and the token from before still work.
	var after api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &after)
	if after.Live.ID != roles.Live.ID || after.Dev.ID != roles.Dev.ID || after.Generation != 1 {
		t.Errorf("roles after restart %s/%s gen %d, want %s/%s gen 1", after.Live.ID, after.Dev.ID, after.Generation, roles.Live.ID, roles.Dev.ID)
	}
	if res := execIn(t, alice, plain.ID, api.ExecRequest{Argv: []string{"cat", "f"}}); string(res.Stdout) != "before\n" {
		t.Errorf("adopted sandbox: %+v", res)
	}
	// The app in the adopted live sandbox still serves, through the new proxy.
	resp := alice.App("GET", "/api/info", nil)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get(api.HeaderSandbox) != roles.Live.ID {
		t.Errorf("GET /api/info after restart: %d %s (%s)", resp.StatusCode, body, resp.Header.Get(api.HeaderSandbox))
	}
	var lost api.Sandbox
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+gvisor.ID, nil), http.StatusOK, &lost)
	if lost.State != api.StateLost || lost.Error == "" {
		t.Errorf("runsc sandbox after restart: %+v, want lost with a reason", lost)
	}
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+gvisor.ID+"/start", nil), http.StatusOK, &lost)
	if lost.State != api.StateRunning {
		t.Errorf("restarting the lost sandbox: %+v", lost)
	}
	resp = alice.DoToken("DELETE", "/api/v1/sandboxes/"+gvisor.ID, nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("delete: %d", resp.StatusCode)
	}
}
