package cli_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/testenv"
)

// paddock backup now prints the backup's ID; ls lists it done with its checkpoint;
// restore --at ID --into NEW prints a new sandbox holding the backup's files, and
// restore without --into takes SANDBOX's workspace back; a malformed --at is refused
// naming it before any request. prune --dry-run prints the backups retention would drop
// and drops none; prune drops them; ls --all lists the store's sandboxes: all for an
// admin, a user's own for a user.
func TestBackupCommands(t *testing.T) {
	s3 := testenv.StartS3(t)
	dir := t.TempDir()
	af, sf := filepath.Join(dir, "access"), filepath.Join(dir, "secret")
	os.WriteFile(af, []byte(s3.AccessKey), 0o600)
	os.WriteFile(sf, []byte(s3.SecretKey), 0o600)
	e := servertest.Start(t, func(cfg *server.Config) {
		cfg.Backup = server.BackupConfig{Endpoint: s3.Endpoint, Bucket: s3.Bucket, AccessKeyFile: af, SecretKeyFile: sf, KeepLast: 1}
	})
	_, pw, err := e.Server.FirstAdmin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	alice := e.Register(t, "alice")
	signedOut(t)
	t.Setenv("PADDOCK_SERVER", e.URL)
	t.Setenv("PADDOCK_TOKEN", alice.Token)
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{}), http.StatusCreated, &sb)
	mustRemote(t, "", "sandbox", "exec", sb.ID, "--", "sh", "-c", "echo draft > notes.txt")
	id := strings.TrimSpace(mustRemote(t, "", "backup", "now", sb.ID))
	if !strings.HasSuffix(id, "Z") {
		t.Fatalf("backup now printed %q", id)
	}
	if ls := mustRemote(t, "", "backup", "ls", sb.ID); !strings.Contains(ls, id) || !strings.Contains(ls, "done") {
		t.Errorf("backup ls:\n%s", ls)
	}
	mustRemote(t, "", "sandbox", "exec", sb.ID, "--", "sh", "-c", "echo final > notes.txt")
	restored := strings.TrimSpace(mustRemote(t, "", "backup", "restore", sb.ID, "--at", id, "--into", "again"))
	if got := mustRemote(t, "", "sandbox", "exec", restored, "--", "cat", "notes.txt"); got != "draft\n" {
		t.Errorf("the restored sandbox's notes.txt: %q", got)
	}
	mustRemote(t, "", "backup", "restore", sb.ID)
	if got := mustRemote(t, "", "sandbox", "exec", sb.ID, "--", "cat", "notes.txt"); got != "draft\n" {
		t.Errorf("notes.txt restored in place: %q", got)
	}
	if _, errOut, code := remote(t, "", "backup", "restore", sb.ID, "--at", "last tuesday"); code == 0 || !strings.Contains(errOut, "last tuesday") {
		t.Errorf("a malformed --at: exit %d, stderr %q", code, errOut)
	}

	second := strings.TrimSpace(mustRemote(t, "", "backup", "now", sb.ID))
	if out := mustRemote(t, "", "backup", "prune", sb.ID, "--dry-run"); out != "would drop "+sb.ID+" "+id+"\n" {
		t.Errorf("backup prune --dry-run printed %q", out)
	}
	if ls := mustRemote(t, "", "backup", "ls", sb.ID); !strings.Contains(ls, id) || !strings.Contains(ls, second) {
		t.Errorf("backup ls after a dry run:\n%s", ls)
	}
	if out := mustRemote(t, "", "backup", "prune", sb.ID); out != "dropped "+sb.ID+" "+id+"\n" {
		t.Errorf("backup prune printed %q", out)
	}
	if ls := mustRemote(t, "", "backup", "ls", sb.ID); strings.Contains(ls, id) || !strings.Contains(ls, second) {
		t.Errorf("backup ls after prune:\n%s", ls)
	}
	if ls := mustRemote(t, "", "backup", "ls", "--all"); !strings.Contains(ls, sb.ID) || !strings.Contains(ls, second) || !strings.Contains(ls, "alice") {
		t.Errorf("backup ls --all by its owner:\n%s", ls)
	}
	t.Setenv("PADDOCK_TOKEN", e.Register(t, "bob").Token)
	if ls := mustRemote(t, "", "backup", "ls", "--all"); strings.Contains(ls, sb.ID) {
		t.Errorf("backup ls --all by another user lists alice's sandbox:\n%s", ls)
	}
	t.Setenv("PADDOCK_TOKEN", e.Token(t, "admin", pw))
	if ls := mustRemote(t, "", "backup", "ls", "--all"); !strings.Contains(ls, sb.ID) || !strings.Contains(ls, second) || !strings.Contains(ls, "alice") {
		t.Errorf("backup ls --all by an admin:\n%s", ls)
	}
}
