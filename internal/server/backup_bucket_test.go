package server_test

import (
	"context"
	"crypto/rand"
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

// newBackupKey writes a backup key (32 random bytes) to a file and returns its path.
func newBackupKey(t *testing.T) string {
	t.Helper()
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	kf := filepath.Join(t.TempDir(), "backup.key")
	if err := os.WriteFile(kf, key, 0o600); err != nil {
		t.Fatal(err)
	}
	return kf
}

// adminOf is a token of e's first admin.
func adminOf(t *testing.T, e *servertest.Env) string {
	t.Helper()
	_, pw, err := e.Server.FirstAdmin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return e.Token(t, "admin", pw)
}

// A lost disk: server A backs a sandbox up and is gone with its database; server B, a
// fresh install (new data dir, new database) on the same bucket with A's backup key,
// lists the sandbox from the bucket, and its admin restores it into a new sandbox given
// to the user the backup's record names, with its files and history. Users who are not
// admins neither list nor restore it: not even a new account under the old username
// (403), as its user ID is not the old one's. A server with another key names the object that
// fails authentication (409, never a 500).
func TestRestoreFromBucketAlone(t *testing.T) {
	s3 := testenv.StartS3(t)
	keyFile := newBackupKey(t)
	withKey := func(kf string) func(*server.Config) {
		return func(cfg *server.Config) {
			backupConfig(t, cfg, s3.Endpoint, s3.Bucket, s3.AccessKey, s3.SecretKey)
			cfg.Backup.KeyFile = kf
		}
	}
	a := servertest.Start(t, withKey(keyFile))
	alice := a.Register(t, "alice")
	var src api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "src", Env: []string{"COLOR=blue"}}), http.StatusCreated, &src)
	base := "/api/v1/sandboxes/" + src.ID + "/backups"
	execIn(t, alice, src.ID, api.ExecRequest{Argv: []string{"sh", "-c", "mkdir -p d && echo one > d/a.txt"}})
	var first, second api.Backup
	servertest.Decode(t, alice.DoToken("POST", base, nil), http.StatusCreated, &first)
	execIn(t, alice, src.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo two > d/a.txt"}})
	servertest.Decode(t, alice.DoToken("POST", base, nil), http.StatusCreated, &second)
	a.Stop(true) // the disk is lost: the sandbox and the database with it

	b := servertest.Start(t, withKey(keyFile))
	admin := adminOf(t, b)
	alice2 := b.Register(t, "alice")
	mallory := b.Register(t, "mallory")

	var all api.BackupSandboxList
	servertest.Decode(t, bearer(t, b, admin, "GET", "/api/v1/backups", nil), http.StatusOK, &all)
	if len(all.Sandboxes) != 1 || all.Sandboxes[0] != (api.BackupSandbox{ID: src.ID, Name: "src", Owner: "alice", Backups: 2,
		Newest: second.ID, Time: second.Time, Known: false}) {
		t.Fatalf("the bucket's sandboxes on the new server: %+v", all)
	}
	// A user lists only the sandboxes the bucket ties to them: a new account under the
	// old username is not the old account, and sees none of its sandboxes.
	for who, do := range map[string]*servertest.Client{"mallory": mallory, "a new account named alice": alice2} {
		var mine api.BackupSandboxList
		servertest.Decode(t, do.DoToken("GET", "/api/v1/backups", nil), http.StatusOK, &mine)
		if len(mine.Sandboxes) != 0 {
			t.Errorf("the bucket's sandboxes as %s lists them: %+v, want none", who, mine)
		}
	}
	// An admin's token without scope admin acts as a plain user.
	var narrow api.Token
	servertest.Decode(t, bearer(t, b, admin, "POST", "/api/v1/tokens", api.CreateTokenRequest{Name: "ro", Scopes: []string{"read"}}), http.StatusCreated, &narrow)
	var narrowed api.BackupSandboxList
	servertest.Decode(t, bearer(t, b, narrow.Secret, "GET", "/api/v1/backups", nil), http.StatusOK, &narrowed)
	if len(narrowed.Sandboxes) != 0 {
		t.Errorf("the bucket's sandboxes through an admin's read-only token: %+v, want the admin's own (none)", narrowed)
	}
	servertest.ErrorOf(t, mallory.DoToken("GET", base, nil), http.StatusNotFound)
	servertest.ErrorOf(t, mallory.DoToken("POST", base+"/restore", api.BackupRestoreRequest{Into: "mine"}), http.StatusNotFound)
	// A new account under the old username is not the old account: refused, and told
	// who may.
	for _, r := range []struct{ method, path string }{{"GET", base}, {"POST", base + "/restore"}} {
		e := servertest.ErrorOf(t, alice2.DoToken(r.method, r.path, api.BackupRestoreRequest{Into: "mine"}), http.StatusForbidden)
		if !strings.Contains(e.Message, "not this one") || !strings.Contains(e.Message, "admin") {
			t.Errorf("%s %s by a new account named alice: %q, want it told the backups are another account's, and that an admin may", r.method, r.path, e.Message)
		}
	}
	var ls api.BackupList
	servertest.Decode(t, bearer(t, b, admin, "GET", base, nil), http.StatusOK, &ls)
	if len(ls.Backups) != 2 || ls.Backups[0].ID != first.ID || ls.Backups[1].State != api.BackupDone || ls.Backups[1].Checkpoint != second.Checkpoint {
		t.Fatalf("the admin's listing of the bucket's backups: %+v", ls)
	}
	if e := servertest.ErrorOf(t, bearer(t, b, admin, "POST", base+"/restore", api.BackupRestoreRequest{}), http.StatusConflict); !strings.Contains(e.Message, "new sandbox") {
		t.Errorf("restore into the sandbox itself, which this server lacks: %q", e.Message)
	}
	servertest.ErrorOf(t, bearer(t, b, admin, "GET", "/api/v1/sandboxes/sb-aaaaaaaaaa/backups", nil), http.StatusNotFound)

	var res api.BackupRestoreResult
	servertest.Decode(t, bearer(t, b, admin, "POST", base+"/restore", api.BackupRestoreRequest{Into: "rescued"}), http.StatusCreated, &res)
	if res.New == nil || res.New.Owner != alice2.User.ID || res.New.Name != "rescued" || res.Backup != second.ID || res.Checkpoint != second.Checkpoint {
		t.Fatalf("restore from the bucket alone: %+v", res)
	}
	if got := catIn(t, alice2, res.New.ID, "d/a.txt"); got != "two\n" {
		t.Errorf("the rescued sandbox's d/a.txt: %q", got)
	}
	if got := execIn(t, alice2, res.New.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo $COLOR"}}); string(got.Stdout) != "blue\n" {
		t.Errorf("the rescued sandbox's environment: %q, want the record's COLOR=blue", got.Stdout)
	}
	var h api.History
	servertest.Decode(t, alice2.DoToken("GET", "/api/v1/sandboxes/"+res.New.ID+"/history", nil), http.StatusOK, &h)
	found := false
	for _, cp := range h.Checkpoints {
		found = found || cp.ID == first.Checkpoint
	}
	if !found {
		t.Fatalf("the rescued sandbox's history lacks the first backup's checkpoint %s: %+v", first.Checkpoint, h.Checkpoints)
	}
	servertest.Decode(t, alice2.DoToken("POST", "/api/v1/sandboxes/"+res.New.ID+"/history/restore", api.RestoreRequest{Checkpoint: first.Checkpoint}), http.StatusOK, nil)
	if got := catIn(t, alice2, res.New.ID, "d/a.txt"); got != "one\n" {
		t.Errorf("d/a.txt at the first backup's checkpoint in the rescued sandbox: %q", got)
	}

	// Another key: the objects are there, sealed under the other key; each answer names the
	// manifest that fails authentication.
	c := servertest.Start(t, withKey(newBackupKey(t)))
	cadmin := adminOf(t, c)
	manifest := backupPrefix(t, b) + "sandboxes/" + src.ID + "/manifests/" + second.ID
	servertest.Decode(t, bearer(t, c, cadmin, "GET", "/api/v1/backups", nil), http.StatusOK, &all)
	if len(all.Sandboxes) != 1 || all.Sandboxes[0].ID != src.ID || !strings.Contains(all.Sandboxes[0].Error, manifest) ||
		!strings.Contains(all.Sandboxes[0].Error, "fails authentication") {
		t.Errorf("the bucket's sandboxes under a wrong key: %+v, want %s named as failing authentication", all, manifest)
	}
	for _, r := range []struct{ method, path string }{{"GET", base}, {"POST", base + "/restore"}} {
		e := servertest.ErrorOf(t, bearer(t, c, cadmin, r.method, r.path, api.BackupRestoreRequest{Into: "wrong"}), http.StatusConflict)
		if !strings.Contains(e.Message, manifest) || !strings.Contains(e.Message, "another backup key") {
			t.Errorf("%s %s under a wrong key: %q, want %s named", r.method, r.path, e.Message, manifest)
		}
	}
}

// Two servers with their own backup keys share a bucket and prefix: each one's retention,
// run on demand, drops only its own backups and deletes none of the other's objects. A
// dry run deletes nothing and says what would go; a user prunes only a sandbox of theirs.
func TestRetentionPerServer(t *testing.T) {
	s3 := testenv.StartS3(t)
	start := func() *servertest.Env {
		return servertest.Start(t, func(cfg *server.Config) {
			backupConfig(t, cfg, s3.Endpoint, s3.Bucket, s3.AccessKey, s3.SecretKey)
			cfg.Backup.KeyFile = newBackupKey(t)
			cfg.Backup.KeepLast, cfg.Backup.PruneGrace = 1, "1ns"
		})
	}
	type install struct {
		e             *servertest.Env
		admin         string
		user          *servertest.Client
		sb            api.Sandbox
		first, second api.Backup
	}
	var two [2]install
	for i := range two {
		x := &two[i]
		x.e = start()
		x.admin = adminOf(t, x.e)
		x.user = x.e.Register(t, "alice")
		servertest.Decode(t, x.user.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "src"}), http.StatusCreated, &x.sb)
		execIn(t, x.user, x.sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo one > a.txt"}})
		servertest.Decode(t, x.user.DoToken("POST", "/api/v1/sandboxes/"+x.sb.ID+"/backups", nil), http.StatusCreated, &x.first)
		execIn(t, x.user, x.sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo two > a.txt"}})
		servertest.Decode(t, x.user.DoToken("POST", "/api/v1/sandboxes/"+x.sb.ID+"/backups", nil), http.StatusCreated, &x.second)
	}
	a, c := &two[0], &two[1]
	count := func(x *install) int {
		var ls api.BackupList
		servertest.Decode(t, x.user.DoToken("GET", "/api/v1/sandboxes/"+x.sb.ID+"/backups", nil), http.StatusOK, &ls)
		return len(ls.Backups)
	}

	var dry api.BackupPruneResult
	servertest.Decode(t, a.user.DoToken("POST", "/api/v1/backups/prune", api.BackupPruneRequest{Sandbox: a.sb.ID, DryRun: true}), http.StatusOK, &dry)
	if !dry.DryRun || dry.Kept != 1 || len(dry.Dropped) != 1 || dry.Dropped[0] != (api.BackupRef{Sandbox: a.sb.ID, Backup: a.first.ID}) || count(a) != 2 {
		t.Fatalf("dry run: %+v, then %d backups; want the first named and both kept", dry, count(a))
	}
	servertest.ErrorOf(t, a.user.DoToken("POST", "/api/v1/backups/prune", api.BackupPruneRequest{}), http.StatusForbidden)
	other := a.e.Register(t, "bob")
	servertest.ErrorOf(t, other.DoToken("POST", "/api/v1/backups/prune", api.BackupPruneRequest{Sandbox: a.sb.ID}), http.StatusNotFound)
	servertest.ErrorOf(t, a.user.DoToken("POST", "/api/v1/backups/prune", api.BackupPruneRequest{Sandbox: "nope"}), http.StatusBadRequest)

	for _, x := range []*install{a, c} {
		var p api.BackupPruneResult
		servertest.Decode(t, bearer(t, x.e, x.admin, "POST", "/api/v1/backups/prune", api.BackupPruneRequest{}), http.StatusOK, &p)
		if p.DryRun || p.Kept != 1 || len(p.Dropped) != 1 || p.Dropped[0] != (api.BackupRef{Sandbox: x.sb.ID, Backup: x.first.ID}) {
			t.Errorf("retention on %s: %+v, want only its own first backup dropped", x.e.URL, p)
		}
	}
	for _, x := range []*install{a, c} {
		if n := count(x); n != 1 {
			t.Errorf("%s holds %d backups after both passes, want its newest", x.e.URL, n)
		}
		var res api.BackupRestoreResult
		servertest.Decode(t, x.user.DoToken("POST", "/api/v1/sandboxes/"+x.sb.ID+"/backups/restore", api.BackupRestoreRequest{Into: "kept"}), http.StatusCreated, &res)
		if got := catIn(t, x.user, res.New.ID, "a.txt"); got != "two\n" {
			t.Errorf("%s: the kept backup restores a.txt as %q", x.e.URL, got)
		}
	}
}

// A user deletes their sandbox; its backups stay in the bucket, and the database no longer
// has it. ls --all (GET /api/v1/backups) lists it, with their live ones, to that user and
// to no other. The user, the same account (same user ID and username) that the backups'
// record names, lists them and restores one into a new sandbox of theirs; another user
// hears of none of it (404), and the sandbox itself cannot be restored into (409).
func TestOwnerRestoresFromBucketAlone(t *testing.T) {
	s3 := testenv.StartS3(t)
	e := servertest.Start(t, func(cfg *server.Config) {
		backupConfig(t, cfg, s3.Endpoint, s3.Bucket, s3.AccessKey, s3.SecretKey)
		cfg.Runner.DiskReserve = 2 << 30 // four sandboxes' disks on a test machine's
	})
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")
	var src api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "src", Env: []string{"COLOR=green"}}), http.StatusCreated, &src)
	base := "/api/v1/sandboxes/" + src.ID + "/backups"
	execIn(t, alice, src.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo kept > a.txt"}})
	var first api.Backup
	servertest.Decode(t, alice.DoToken("POST", base, nil), http.StatusCreated, &first)
	var live api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "live"}), http.StatusCreated, &live)
	execIn(t, alice, live.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo live > a.txt"}})
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+live.ID+"/backups", nil), http.StatusCreated, nil)
	var bobs api.Sandbox
	servertest.Decode(t, bob.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "bobs"}), http.StatusCreated, &bobs)
	execIn(t, bob, bobs.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo bob > a.txt"}})
	servertest.Decode(t, bob.DoToken("POST", "/api/v1/sandboxes/"+bobs.ID+"/backups", nil), http.StatusCreated, nil)
	servertest.Decode(t, alice.DoToken("DELETE", "/api/v1/sandboxes/"+src.ID, nil), http.StatusNoContent, nil)

	// ls --all: alice finds her deleted sandbox's ID (and her live one); bob sees only his.
	listed := func(c *servertest.Client) map[string]api.BackupSandbox {
		var l api.BackupSandboxList
		servertest.Decode(t, c.DoToken("GET", "/api/v1/backups", nil), http.StatusOK, &l)
		out := map[string]api.BackupSandbox{}
		for _, s := range l.Sandboxes {
			out[s.ID] = s
		}
		return out
	}
	mine := listed(alice)
	if len(mine) != 2 || mine[src.ID] != (api.BackupSandbox{ID: src.ID, Name: "src", Owner: "alice", Backups: 1, Newest: first.ID, Time: first.Time}) ||
		!mine[live.ID].Known {
		t.Fatalf("alice's sandboxes in the bucket: %+v, want %s (deleted) and %s", mine, src.ID, live.ID)
	}
	if theirs := listed(bob); len(theirs) != 1 || !theirs[bobs.ID].Known {
		t.Fatalf("bob's sandboxes in the bucket: %+v, want only %s", theirs, bobs.ID)
	}

	for _, r := range []struct{ method, path string }{{"GET", base}, {"POST", base + "/restore"}} {
		servertest.ErrorOf(t, bob.DoToken(r.method, r.path, api.BackupRestoreRequest{Into: "theirs"}), http.StatusNotFound)
	}
	var ls api.BackupList
	servertest.Decode(t, alice.DoToken("GET", base, nil), http.StatusOK, &ls)
	if len(ls.Backups) != 1 || ls.Backups[0].ID != first.ID || ls.Backups[0].State != api.BackupDone {
		t.Fatalf("the owner's listing of a deleted sandbox's backups: %+v", ls)
	}
	servertest.ErrorOf(t, alice.DoToken("POST", base+"/restore", api.BackupRestoreRequest{}), http.StatusConflict)
	servertest.ErrorOf(t, alice.DoToken("POST", base+"/restore", api.BackupRestoreRequest{Into: "x", Backup: "20200101T000000.000000000Z"}), http.StatusNotFound)
	var res api.BackupRestoreResult
	servertest.Decode(t, alice.DoToken("POST", base+"/restore", api.BackupRestoreRequest{Into: "rescued"}), http.StatusCreated, &res)
	if res.New == nil || res.New.Owner != alice.User.ID || res.New.Name != "rescued" || res.Backup != first.ID {
		t.Fatalf("the owner's restore from the bucket alone: %+v", res)
	}
	if got := catIn(t, alice, res.New.ID, "a.txt"); got != "kept\n" {
		t.Errorf("the rescued sandbox's a.txt: %q", got)
	}
	if got := execIn(t, alice, res.New.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo $COLOR"}}); string(got.Stdout) != "green\n" {
		t.Errorf("the rescued sandbox's environment: %q, want the record's COLOR=green", got.Stdout)
	}
	// The restored sandbox is in the database: bob still hears of neither.
	servertest.ErrorOf(t, bob.DoToken("GET", "/api/v1/sandboxes/"+res.New.ID+"/backups", nil), http.StatusNotFound)
}
