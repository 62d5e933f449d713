package cli_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
)

// paddock sandbox files mkdir, mv and rm against a real server and sandbox: what they do
// is what the sandbox then sees; a refusal is one line naming the path and why; with
// several paths, each failure is reported and the rest are done.
func TestSandboxFilesCommands(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	signedOut(t)
	t.Setenv("PADDOCK_SERVER", e.URL)
	t.Setenv("PADDOCK_TOKEN", alice.Token)
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}), http.StatusCreated, &sb)
	sh := func(script string) string {
		t.Helper()
		var res api.ExecResult
		servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/exec", api.ExecRequest{Argv: []string{"sh", "-c", script}}), http.StatusOK, &res)
		if res.ExitCode != 0 {
			t.Fatalf("sh -c %q: exit %d: %s", script, res.ExitCode, res.Stderr)
		}
		return string(res.Stdout)
	}

	if out := mustRemote(t, "", "sandbox", "files", "mkdir", "-p", "-m", "1775", sb.ID, "src/pkg", "/workspace/lib"); out != "src/pkg\nlib\n" {
		t.Errorf("mkdir: %q", out)
	}
	if out := sh("cd /workspace && ls -A && stat -c %a src/pkg lib"); out != "lib\nsrc\n1775\n1775\n" {
		t.Errorf("after mkdir: %q", out)
	}
	wantFailure(t, "", `mkdir "lib": already exists`, "sandbox", "files", "mkdir", sb.ID, "lib")
	wantFailure(t, "", `mode "9": want an octal permission`, "sandbox", "files", "mkdir", "-m", "9", sb.ID, "x")

	sh("echo a > /workspace/src/a.txt; echo b > /workspace/lib/b.txt")
	if out := mustRemote(t, "", "sandbox", "files", "mv", sb.ID, "src/a.txt", "/workspace/lib/a.txt"); out != "src/a.txt -> lib/a.txt\n" {
		t.Errorf("mv: %q", out)
	}
	wantFailure(t, "", `move "lib/a.txt" to "lib/b.txt": already exists`, "sandbox", "files", "mv", sb.ID, "lib/a.txt", "lib/b.txt")
	mustRemote(t, "", "sandbox", "files", "mv", "-f", sb.ID, "lib/a.txt", "lib/b.txt")
	if out := sh("cd /workspace && ls -A src lib && cat lib/b.txt"); out != "lib:\nb.txt\n\nsrc:\npkg\na\n" {
		t.Errorf("after mv: %q", out)
	}
	wantFailure(t, "", "a move needs two different paths", "sandbox", "files", "mv", sb.ID, "lib", "/workspace/lib")
	wantFailure(t, "", "want ID FROM TO", "sandbox", "files", "mv", sb.ID, "lib")

	wantFailure(t, "", `remove "lib": directory not empty`, "sandbox", "files", "rm", sb.ID, "lib")
	if out := mustRemote(t, "", "sandbox", "files", "rm", "-r", sb.ID, "lib"); out != "lib\n" {
		t.Errorf("rm -r: %q", out)
	}
	// Several paths: the missing one is reported, the others removed.
	out, errOut, code := remote(t, "", "sandbox", "files", "rm", "-r", sb.ID, "src/pkg", "nope", "src")
	if out != "src/pkg\nsrc\n" || code == 0 || !strings.Contains(errOut, `paddock: remove nope: remove "nope": not found`) || !strings.Contains(errOut, "1 of 3 paths not removed") {
		t.Errorf("rm of three paths, one missing: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if out := sh("ls -A /workspace"); out != "" {
		t.Errorf("after rm, the workspace holds %q", out)
	}
	wantFailure(t, "", "not found", "sandbox", "files", "rm", "sb-aaaaaaaaaa", "x")
	wantFailure(t, "", "give a subcommand: mkdir, mv or rm", "sandbox", "files")
}
