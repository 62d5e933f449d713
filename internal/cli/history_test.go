package cli_test

import (
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/servertest"
)

// paddock history, checkpoint, undo, redo and restore against a real server and sandbox.
func TestHistoryCommands(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	signedOut(t)
	t.Setenv("PADDOCK_SERVER", e.URL)
	t.Setenv("PADDOCK_TOKEN", alice.Token)
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}), http.StatusCreated, &sb)
	write := func(data string) {
		t.Helper()
		servertest.Decode(t, alice.DoToken("PUT", "/api/v1/sandboxes/"+sb.ID+"/files/content?path=notes.txt", bytes.NewReader([]byte(data))), http.StatusOK, nil)
	}
	read := func() string {
		t.Helper()
		return mustRemote(t, "", "sandbox", "exec", sb.ID, "--", "cat", "notes.txt")
	}

	write("draft")
	if out := mustRemote(t, "", "checkpoint", sb.ID, "-m", "before refactor"); !regexp.MustCompile(`^nothing changed since checkpoint \d+\n$`).MatchString(out) {
		t.Errorf("checkpoint of nothing: %q", out)
	}
	mustRemote(t, "", "sandbox", "exec", sb.ID, "--", "sh", "-c", "echo refactored > notes.txt")

	out := mustRemote(t, "", "history", sb.ID)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !regexp.MustCompile(`^\s*ID\s+TIME\s+CAUSE\s+CHANGED\s+MESSAGE$`).MatchString(lines[0]) || len(lines) < 4 {
		t.Fatalf("history:\n%s", out)
	}
	row := regexp.MustCompile(`^(\*?)\s*(\d+)\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+(\S+)\s+(\d+)\s+(.*)$`)
	newest, write1 := row.FindStringSubmatch(lines[1]), row.FindStringSubmatch(lines[2])
	if len(newest) < 6 || newest[1] != "*" || newest[3] != "exec" || newest[5] != "exec: sh" {
		t.Errorf("history's newest row %q: want the current exec checkpoint", lines[1])
	}
	if len(write1) < 6 || write1[3] != "agent-write" || write1[4] != "1" || write1[5] != "write notes.txt" {
		t.Fatalf("history's second row %q: want the agent-write of notes.txt", lines[2])
	}

	out = mustRemote(t, "", "undo", sb.ID)
	if !strings.Contains(out, "workspace at checkpoint "+write1[2]) || !strings.Contains(out, "app restarted") || read() != "draft" {
		t.Errorf("undo: %q, notes.txt %q", out, read())
	}
	mustRemote(t, "", "redo", sb.ID)
	if got := read(); got != "refactored\n" {
		t.Errorf("redo: notes.txt %q", got)
	}
	mustRemote(t, "", "restore", sb.ID, write1[2])
	if got := read(); got != "draft" {
		t.Errorf("restore %s: notes.txt %q", write1[2], got)
	}
	t.Log("paddock history:\n" + mustRemote(t, "", "history", sb.ID))

	wantFailure(t, "", `checkpoint "424242"`, "restore", sb.ID, "424242")
	wantFailure(t, "", "want ID and CHECKPOINT", "restore", sb.ID)
	wantFailure(t, "", "not found", "history", "sb-aaaaaaaaaa")
}

// paddock tx begin, commit and rollback against a real server and sandbox.
func TestTxCommands(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	signedOut(t)
	t.Setenv("PADDOCK_SERVER", e.URL)
	t.Setenv("PADDOCK_TOKEN", alice.Token)
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}), http.StatusCreated, &sb)
	read := func() string {
		t.Helper()
		return mustRemote(t, "", "sandbox", "exec", sb.ID, "--", "cat", "notes.txt")
	}
	mustRemote(t, "", "sandbox", "exec", sb.ID, "--", "sh", "-c", "echo one > notes.txt")

	out := mustRemote(t, "", "tx", "begin", sb.ID, "-m", "rewrite notes")
	if !regexp.MustCompile(`: transaction tx1 begun at checkpoint \d+\n$`).MatchString(out) {
		t.Errorf("tx begin: %q", out)
	}
	wantFailure(t, "", "transaction tx1 (\"rewrite notes\")", "tx", "begin", sb.ID)
	mustRemote(t, "", "sandbox", "exec", sb.ID, "--", "sh", "-c", "echo two > notes.txt")
	if out := mustRemote(t, "", "history", sb.ID); !strings.Contains(out, "transaction tx1 open since") {
		t.Errorf("history does not show the open transaction:\n%s", out)
	}
	if out := mustRemote(t, "", "tx", "commit", sb.ID); !regexp.MustCompile(`transaction tx1 committed as checkpoint \d+ \(1 path changed\)`).MatchString(out) {
		t.Errorf("tx commit: %q", out)
	}
	mustRemote(t, "", "tx", "begin", sb.ID)
	mustRemote(t, "", "sandbox", "exec", sb.ID, "--", "sh", "-c", "echo three > notes.txt")
	if out := mustRemote(t, "", "tx", "rollback", sb.ID); !strings.Contains(out, "transaction tx2 rolled back") || read() != "two\n" {
		t.Errorf("tx rollback: %q, notes.txt %q", out, read())
	}
	wantFailure(t, "", "no transaction is open", "tx", "commit", sb.ID)
	wantFailure(t, "", "give a subcommand", "tx")
}

// paddock history export and import, to a file and through standard output, against a
// real server and two sandboxes.
func TestHistoryExportImportCommands(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	signedOut(t)
	t.Setenv("PADDOCK_SERVER", e.URL)
	t.Setenv("PADDOCK_TOKEN", alice.Token)
	var from, to api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "from"}), http.StatusCreated, &from)
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "to"}), http.StatusCreated, &to)
	mustRemote(t, "", "sandbox", "exec", from.ID, "--", "sh", "-c", "echo one > notes.txt")
	mustRemote(t, "", "sandbox", "exec", from.ID, "--", "sh", "-c", "echo two > notes.txt")
	mustRemote(t, "", "history", to.ID) // its first checkpoint is in

	file := filepath.Join(t.TempDir(), "from.history")
	mustRemote(t, "", "history", "export", from.ID, "-o", file)
	data, err := os.ReadFile(file)
	if err != nil || len(data) == 0 {
		t.Fatalf("export to %s: %d bytes, %v", file, len(data), err)
	}
	if leftover, _ := filepath.Glob(filepath.Join(filepath.Dir(file), ".*.partial")); len(leftover) != 0 {
		t.Errorf("export left %v behind", leftover)
	}
	if out := mustRemote(t, "", "history", "export", from.ID, "-o", "-"); len(out) == 0 {
		t.Error("export to standard output wrote nothing")
	}

	wantFailure(t, "not an export", "unusable", "history", "import", to.ID, "-")
	out := mustRemote(t, "", "history", "import", to.ID, file)
	if !regexp.MustCompile(`^` + to.ID + `: history imported; workspace at checkpoint \d+; `).MatchString(out) {
		t.Errorf("import: %q", out)
	}
	if got := mustRemote(t, "", "sandbox", "exec", to.ID, "--", "cat", "notes.txt"); got != "two\n" {
		t.Errorf("imported notes.txt %q", got)
	}
	mustRemote(t, "", "undo", to.ID)
	if got := mustRemote(t, "", "sandbox", "exec", to.ID, "--", "cat", "notes.txt"); got != "one\n" {
		t.Errorf("undo after import: notes.txt %q", got)
	}

	wantFailure(t, string(data), "not empty", "history", "import", from.ID, "-")
	wantFailure(t, "", "no such file", "history", "import", to.ID, filepath.Join(t.TempDir(), "missing"))
	wantFailure(t, "", "want ID and FILE", "history", "import", to.ID)
}
