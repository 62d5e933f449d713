package server_test

import (
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
)

// `paddock serve` SIGKILLed in the middle of a build: the build's transaction stays open
// in the sandbox with what it half wrote. The next step, served by the control plane
// started again, puts the workspace back as it was before the build, says so, and runs.
// Meanwhile a second step is refused.
func TestProviderStepInterruptedBySIGKILL(t *testing.T) {
	config := serveConfig(t)
	url, cmd, _ := startServe(t, config)
	e := &servertest.Env{URL: url}
	alice := e.Register(t, "alice")
	var roles api.Roles
	alice.MustJSON("GET", "/api/v1/roles", nil, http.StatusOK, &roles)
	current := cmd
	t.Cleanup(func() {
		for _, id := range []string{roles.Live.ID, roles.Dev.ID} {
			resp := alice.DoToken("DELETE", "/api/v1/sandboxes/"+id, nil)
			resp.Body.Close()
		}
		stopServe(t, current)
	})
	id := roles.Dev.ID
	// The build writes half-done and, the first time (/tmp/slow, outside the workspace's
	// history, says so), waits to be killed; the tests pass only without half-done.
	execOK(t, alice, id, "sh", "-c", `mkdir app && cd app && touch /tmp/slow && cat > package.json <<'E'
{"name": "app", "version": "1.0.0", "scripts": {
  "build": "echo half > half-done; if [ -f /tmp/slow ]; then rm /tmp/slow; sleep 600; fi",
  "test": "test ! -f half-done"}}
E
npm install --offline --no-audit --no-fund >/dev/null`)
	app := api.ProviderRequest{Dir: "app"}

	resp := alice.DoTokenStream("POST", "/api/v1/sandboxes/"+id+"/app/build", app)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("build: %d", resp.StatusCode)
	}
	go func() { _, _ = io.Copy(io.Discard, resp.Body); resp.Body.Close() }()
	// Bound by the build's progress: it has half written the project once /tmp/slow is gone.
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		var res api.ExecResult
		servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+id+"/exec", api.ExecRequest{Argv: []string{"sh", "-c", "test -f app/half-done && ! test -f /tmp/slow"}}), http.StatusOK, &res)
		if res.ExitCode == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the build never reached its wait")
		}
	}
	// One step at a time: a second is refused before its stream, saying why.
	if e := servertest.ErrorOf(t, alice.DoToken("POST", "/api/v1/sandboxes/"+id+"/app/validate", app), http.StatusConflict); !strings.Contains(e.Message, "another step is running") {
		t.Errorf("validate while the build runs: %q, want it refused as another step is running", e.Message)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	cmd2, _, err := startServeAt(t, config, strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	current = cmd2

	var h api.History
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+id+"/history", nil), http.StatusOK, &h)
	if h.Transaction == nil || !strings.Contains(h.Transaction.Message, "build") {
		t.Fatalf("after the SIGKILL the sandbox's open transaction is %+v, want the build's", h.Transaction)
	}
	evs := providerStep(t, alice, id, "validate", app)
	if r := result(evs); r.Error != "" {
		t.Fatalf("validate after the interrupted build: %+v; log:\n%s", r, logText(evs))
	}
	if !logged(evs, "the build begun at") || !logged(evs, "put back as it was before it") {
		t.Errorf("validate did not say the interrupted build was undone; log:\n%s", logText(evs))
	}
	if ls := execOK(t, alice, id, "ls", "app"); strings.Contains(ls, "half-done") {
		t.Errorf("after the interrupted build was undone the project holds %q", ls)
	}
	h = api.History{}
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+id+"/history", nil), http.StatusOK, &h)
	if h.Transaction != nil {
		t.Errorf("a transaction is still open after validate: %+v", h.Transaction)
	}
}
