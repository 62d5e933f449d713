package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
)

// An exec whose sandbox is stopped while it runs is answered as what it is, a sandbox
// that went away (409 or 503, saying so), never as a server fault.
func TestExecEndsWhenTheSandboxStops(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &sb)
	done := make(chan *http.Response, 1)
	go func() {
		done <- alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/exec", api.ExecRequest{Argv: []string{"sh", "-c", "touch /tmp/started; sleep 600"}})
	}()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"test", "-e", "/tmp/started"}}); res.ExitCode == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the long exec never started")
		}
	}
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/stop", nil), http.StatusOK, nil)
	resp := <-done
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 500 && resp.StatusCode != http.StatusServiceUnavailable || resp.StatusCode == http.StatusOK {
		t.Fatalf("exec of a sandbox stopped under it: %d %s", resp.StatusCode, body)
	}
	if !strings.Contains(string(body), "stop") {
		t.Errorf("the answer does not say the sandbox stopped: %d %s", resp.StatusCode, body)
	}
}
