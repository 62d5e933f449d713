package cli_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
)

// paddock sandbox fork ID --at CHECKPOINT prints the new sandbox's ID, whose workspace is
// the checkpoint's; a checkpoint that does not exist fails with its name; a stopped
// sandbox forks from its current checkpoint.
func TestSandboxForkCommand(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	signedOut(t)
	t.Setenv("PADDOCK_SERVER", e.URL)
	t.Setenv("PADDOCK_TOKEN", alice.Token)
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}), http.StatusCreated, &sb)
	mustRemote(t, "", "sandbox", "exec", sb.ID, "--", "sh", "-c", "echo draft > notes.txt")
	var cp api.CheckpointResult
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/history/checkpoints", api.CheckpointRequest{}), http.StatusOK, &cp)
	mustRemote(t, "", "sandbox", "exec", sb.ID, "--", "sh", "-c", "echo final > notes.txt")

	out, errOut, code := remote(t, "", "sandbox", "fork", sb.ID, "--at", cp.Checkpoint.ID)
	fork := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(fork, "sb-") || !strings.Contains(errOut, "at checkpoint "+cp.Checkpoint.ID) {
		t.Fatalf("fork: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if got := mustRemote(t, "", "sandbox", "exec", fork, "--", "cat", "notes.txt"); got != "draft\n" {
		t.Errorf("the fork's notes.txt: %q", got)
	}
	if _, errOut, code := remote(t, "", "sandbox", "fork", sb.ID, "--at", "424242"); code == 0 || !strings.Contains(errOut, "424242") {
		t.Errorf("fork of a missing checkpoint: exit %d, stderr %q", code, errOut)
	}
	mustRemote(t, "", "sandbox", "stop", sb.ID)
	stopped := strings.TrimSpace(mustRemote(t, "", "sandbox", "fork", sb.ID))
	if got := mustRemote(t, "", "sandbox", "exec", stopped, "--", "cat", "notes.txt"); got != "final\n" {
		t.Errorf("the fork of the stopped sandbox holds %q", got)
	}
}
