package cli_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/paddockhq/paddock"
	"github.com/paddockhq/paddock/internal/secrets"
	"github.com/paddockhq/paddock/internal/servertest"
	"github.com/paddockhq/paddock/internal/store"
)

// secretsDataDir is a server's data dir with a database, a key file and two secrets of
// one user; it returns the dir and the user's ID.
func secretsDataDir(t *testing.T) (string, string) {
	t.Helper()
	t.Setenv(secrets.EnvKey, "")
	dir := t.TempDir()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(dir, "paddock.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var u store.User
	err = st.Update(ctx, func(tx *store.Tx) error {
		u, err = tx.CreateUser(ctx, store.User{Username: "alice", PasswordHash: "$argon2id$x", Role: store.RoleUser, CreatedAt: time.Now()}, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := secrets.Open(ctx, st, secrets.KeySource{File: filepath.Join(dir, secrets.KeyFileName)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if _, err := s.Put(ctx, u.ID, name, []byte("value of "+name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir, u.ID
}

// checkSecrets opens dir as the server would and checks that both values read back and
// that every row is under key version want.
func checkSecrets(t *testing.T, dir, userID string, want int) {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(dir, "paddock.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s, err := secrets.Open(ctx, st, secrets.KeySource{File: filepath.Join(dir, secrets.KeyFileName)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		if v, _, err := s.Get(ctx, userID, name); err != nil || string(v.Reveal()) != "value of "+name {
			t.Errorf("Get(%s) after rotate-key: %v", name, err)
		}
	}
	db, err := sql.Open("sqlite", filepath.Join(dir, "paddock.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM secrets WHERE key_version <> ?`, want).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d secrets not under key version %d (%v)", n, want, err)
	}
}

func TestSecretsRotateKey(t *testing.T) {
	dir, userID := secretsDataDir(t)
	keyFile := filepath.Join(dir, secrets.KeyFileName)
	out := mustRemote(t, "", "secrets", "rotate-key", "--data", dir)
	for _, want := range []string{"Rotated the secrets key in " + keyFile + ": version 1 -> 2, now primary. Re-encrypted 2 secrets under version 2.",
		"The key file keeps versions 1 for database backups"} {
		if !strings.Contains(out, want) {
			t.Errorf("rotate-key said %q; want %q", out, want)
		}
	}
	checkSecrets(t, dir, userID, 2)
	out = mustRemote(t, "", "secrets", "rotate-key", "--data", dir)
	if !strings.Contains(out, "version 2 -> 3") || !strings.Contains(out, "keeps versions 1 2 ") {
		t.Errorf("second rotate-key: %q", out)
	}
	checkSecrets(t, dir, userID, 3)

	// --config's data_dir is the same as --data.
	conf := filepath.Join(t.TempDir(), "paddock.yaml")
	if err := os.WriteFile(conf, []byte("data_dir: "+dir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := mustRemote(t, "", "secrets", "rotate-key", "--config", conf); !strings.Contains(out, "version 3 -> 4") {
		t.Errorf("rotate-key --config: %q", out)
	}
	checkSecrets(t, dir, userID, 4)
}

func TestSecretsRotateKeyFailures(t *testing.T) {
	t.Run("no database", func(t *testing.T) {
		empty := t.TempDir()
		wantFailure(t, "", "no paddock database at "+filepath.Join(empty, "paddock.db"), "secrets", "rotate-key", "--data", empty)
		if _, err := os.Stat(filepath.Join(empty, secrets.KeyFileName)); !os.IsNotExist(err) {
			t.Errorf("a key file was made for no database: %v", err)
		}
	})
	t.Run("wrong key", func(t *testing.T) {
		dir, userID := secretsDataDir(t)
		keyFile := filepath.Join(dir, secrets.KeyFileName)
		right, _ := os.ReadFile(keyFile)
		wrong := "paddock-keyring 1\nprimary 1\nkey 1 " + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32)) + "\n"
		if err := os.WriteFile(keyFile, []byte(wrong), 0o600); err != nil {
			t.Fatal(err)
		}
		wantFailure(t, "", "key version 1 in the key file "+keyFile+" is not the key the database", "secrets", "rotate-key", "--data", dir)
		if after, _ := os.ReadFile(keyFile); string(after) != wrong {
			t.Error("a refused rotation changed the key file")
		}
		if err := os.WriteFile(keyFile, right, 0o600); err != nil {
			t.Fatal(err)
		}
		checkSecrets(t, dir, userID, 1)
	})
	t.Run("environment key", func(t *testing.T) {
		dir := t.TempDir()
		t.Setenv(secrets.EnvKey, base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, 32)))
		st, err := store.Open(context.Background(), filepath.Join(dir, "paddock.db"))
		if err != nil {
			t.Fatal(err)
		}
		st.Close()
		wantFailure(t, "", "comes from PADDOCK_SECRETS_KEY, which paddock cannot rewrite", "secrets", "rotate-key", "--data", dir)
	})
	t.Run("arguments", func(t *testing.T) {
		wantFailure(t, "", "unknown command", "secrets", "rotate-key", "now")
		wantFailure(t, "", "give a subcommand", "secrets")
	})
}

// ls, set and rm are API clients, signed in like every remote command.
func TestSecretsCommands(t *testing.T) {
	e := servertest.Start(t)
	alice := e.Register(t, "alice")
	signedOut(t)
	t.Setenv(sdk.EnvServer, e.URL)
	t.Setenv(sdk.EnvToken, alice.Token)
	value := func(name string) string {
		v, _, err := e.Server.Secrets().Get(context.Background(), alice.User.ID, name)
		if err != nil {
			t.Fatalf("Get(%s): %v", name, err)
		}
		return string(v.Reveal())
	}
	if out := mustRemote(t, "ghp_first\n", "secrets", "set", "github"); out != "secret github: version 1\n" {
		t.Errorf("set: %q", out)
	}
	if got := value("github"); got != "ghp_first" {
		t.Errorf("stored %q: want the line without its ending", got)
	}
	mustRemote(t, "line one\nline two\r\n", "secrets", "set", "github")
	if got := value("github"); got != "line one\nline two" {
		t.Errorf("stored %q", got)
	}
	out := mustRemote(t, "", "secrets", "ls")
	if !strings.HasPrefix(out, "NAME") || !strings.Contains(out, "github") || !strings.Contains(out, " 2 ") || strings.Contains(out, "line one") {
		t.Errorf("ls: %q", out)
	}
	wantFailure(t, "", "no value on stdin", "secrets", "set", "github")
	wantFailure(t, strings.Repeat("x", secrets.MaxValueSize+1), "over the limit of 65536 bytes", "secrets", "set", "big")
	wantFailure(t, "v", `secret name "GitHub"`, "secrets", "set", "GitHub")
	mustRemote(t, "", "secrets", "rm", "github")
	wantFailure(t, "", `secret "github": not found`, "secrets", "rm", "github")
	if out := mustRemote(t, "", "secrets", "ls"); strings.Contains(out, "github") {
		t.Errorf("ls after rm: %q", out)
	}
}
