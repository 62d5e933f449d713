package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/paddockhq/paddock/internal/api"
	"github.com/paddockhq/paddock/internal/secrets"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/store/pgtest"
	"github.com/paddockhq/paddock/internal/testenv"
)

// paddockCmd runs the paddock binary and fails t unless it exits 0.
func paddockCmd(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(testenv.Binary(t, "paddock"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("paddock %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// A whole install moves to a new machine: while `paddock serve` runs with users,
// sandboxes, secrets and files, `paddock admin backup` copies it; a fresh data dir (and,
// on PostgreSQL, a fresh database) restored from that copy with `paddock admin restore`,
// the key files from where they were kept apart and the workspaces copied as
// docs/operations.md says, serves everything: the accounts and their tokens, the
// sandboxes with their files, and the secrets, read back through the API and the broker.
func TestBackupRestoresWholeInstall(t *testing.T) {
	testenv.RequireRoot(t)
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			var oldStore, newStore []string
			if backend == "postgres" {
				oldStore, newStore = []string{"--store", pgtest.URL(t)}, []string{"--store", pgtest.URL(t)}
			}
			testMoveInstall(t, oldStore, newStore)
		})
	}
}

func testMoveInstall(t *testing.T, oldStore, newStore []string) {
	policy := filepath.Join(t.TempDir(), "broker.yaml")
	if err := os.WriteFile(policy, []byte(brokerPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	config := func(data, state, agent string) string {
		p := filepath.Join(t.TempDir(), "paddock.yaml")
		yaml := fmt.Sprintf("data_dir: %s\nstate_dir: %s\nagent: %s\nbroker_policy: %s\n", data, state, agent, policy)
		if err := os.WriteFile(p, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	old := testenv.Config(t)
	oldConfig := config(old.DataDir, old.StateDir, old.Agent)
	url, cmd, _ := startServe(t, oldConfig, oldStore...)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
		}
	})
	e := &servertest.Env{URL: url}
	alice, bob := e.Register(t, "alice"), e.Register(t, "bob")
	const canary = "ghp_CANARY_backup_51c2"
	servertest.Decode(t, alice.DoToken("PUT", "/api/v1/me/secrets/github_token", api.PutSecretRequest{Value: canary}), http.StatusOK, nil)
	var sb api.Sandbox
	servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes", api.CreateSandboxRequest{Name: "work"}), http.StatusCreated, &sb)
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", "echo kept > notes.txt && sync"}}); res.ExitCode != 0 {
		t.Fatalf("write a file: %+v", res)
	}

	// The backup, while serving; the keys go apart.
	backup, keys := filepath.Join(t.TempDir(), "backup"), filepath.Join(t.TempDir(), "keys")
	out := paddockCmd(t, append([]string{"admin", "backup", backup, "--config", oldConfig, "--keys", keys}, oldStore...)...)
	if !strings.Contains(out, "Keep") && !strings.Contains(out, "keep it apart") {
		t.Errorf("backup's output does not say to keep the keys apart:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(backup, secrets.KeyFileName)); err == nil {
		t.Errorf("the backup directory holds the secrets key")
	}
	raw, err := os.ReadFile(filepath.Join(backup, server.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), canary) {
		t.Fatalf("the manifest holds the secret")
	}
	var m server.Manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.KeepApart) == 0 || m.KeepApart[0].Name != secrets.KeyFileName {
		t.Errorf("manifest keep_apart %+v: want the secrets key first", m.KeepApart)
	}
	for _, f := range m.KeepApart {
		if _, err := os.Stat(filepath.Join(keys, f.Name)); err != nil {
			t.Errorf("key file %s not in the keys directory: %v", f.Name, err)
		}
	}

	// The old machine goes away: its sandboxes stopped (their disks unmounted), serve
	// stopped, the workspaces copied as docs/operations.md says.
	var list api.SandboxList
	for _, c := range []*servertest.Client{alice, bob} {
		servertest.Decode(t, c.DoToken("GET", "/api/v1/sandboxes", nil), http.StatusOK, &list)
		for _, s := range list.Sandboxes {
			servertest.Decode(t, c.DoToken("POST", "/api/v1/sandboxes/"+s.ID+"/stop", nil), http.StatusOK, nil)
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	stopped = true
	fresh := testenv.Config(t)
	if err := os.MkdirAll(fresh.DataDir, 0o711); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", "--sparse=always", old.WorkspaceRoot, fresh.WorkspaceRoot).CombinedOutput(); err != nil {
		t.Fatalf("copy the workspaces: %v\n%s", err, out)
	}
	newConfig := config(fresh.DataDir, fresh.StateDir, fresh.Agent)
	out = paddockCmd(t, append([]string{"admin", "restore", backup, "--config", newConfig, "--keys", keys}, newStore...)...)
	if !strings.Contains(out, "workspaces") {
		t.Errorf("restore's output does not say to copy the workspaces:\n%s", out)
	}

	url2, cmd2, out2 := startServe(t, newConfig, newStore...)
	t.Cleanup(func() {
		for _, c := range []*servertest.Client{alice, bob} {
			var list api.SandboxList
			servertest.Decode(t, c.DoToken("GET", "/api/v1/sandboxes", nil), http.StatusOK, &list)
			for _, s := range list.Sandboxes {
				c.DoToken("DELETE", "/api/v1/sandboxes/"+s.ID, nil).Body.Close()
			}
		}
		cmd2.Process.Signal(syscall.SIGTERM)
		cmd2.Wait()
	})
	if strings.Contains(out2.String(), "First start") {
		t.Errorf("the restored install started as a first start:\n%s", out2)
	}
	alice.Base, bob.Base, e.URL = url2, url2, url2
	// Accounts and their tokens; a password still signs in.
	var me api.User
	servertest.Decode(t, bob.DoToken("GET", "/api/v1/me", nil), http.StatusOK, &me)
	if me.Username != "bob" {
		t.Errorf("bob's token after restore: %+v", me)
	}
	tok := e.Token(t, "alice", "correct horse battery alice")
	if tok == "" {
		t.Errorf("alice's password does not sign in after restore")
	}
	// The secret, through the API.
	var secs api.SecretList
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/me/secrets", nil), http.StatusOK, &secs)
	if len(secs.Secrets) != 1 || secs.Secrets[0].Name != "github_token" {
		t.Errorf("alice's secrets after restore: %+v", secs)
	}
	// The sandbox: the new machine did not run it, so it is lost until started; then its
	// file is there, and the broker hands it the secret.
	var got api.Sandbox
	servertest.Decode(t, alice.DoToken("GET", "/api/v1/sandboxes/"+sb.ID, nil), http.StatusOK, &got)
	if got.Name != "work" {
		t.Fatalf("sandbox after restore: %+v", got)
	}
	if got.State != api.StateRunning {
		servertest.Decode(t, alice.DoToken("POST", "/api/v1/sandboxes/"+sb.ID+"/start", nil), http.StatusOK, &got)
	}
	if res := execIn(t, alice, sb.ID, api.ExecRequest{Argv: []string{"cat", "notes.txt"}}); res.ExitCode != 0 || string(res.Stdout) != "kept\n" {
		t.Errorf("the workspace's file after restore: %+v", res)
	}
	if res := secretCmd(t, alice, sb.ID, "get", "github"); res.ExitCode != 0 || string(res.Stdout) != canary {
		t.Errorf("the broker after restore: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}
