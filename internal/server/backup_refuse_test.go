package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/secrets"
	"github.com/paddockhq/paddock/internal/server"
	"github.com/paddockhq/paddock/internal/store"
	"github.com/paddockhq/paddock/internal/testenv"
)

// smallInstall is a data dir with a database holding one secret and its key file, as a
// serve would leave it.
func smallInstall(t *testing.T) server.Config {
	t.Helper()
	cfg, err := server.LoadConfig("", t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := store.Open(ctx, server.DatabasePath(cfg))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var u store.User
	err = st.Update(ctx, func(tx *store.Tx) error {
		var err error
		u, err = tx.CreateUser(ctx, store.User{Username: "alice", PasswordHash: "$argon2id$x", Role: store.RoleUser, CreatedAt: time.Now()}, nil)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sec, err := secrets.Open(ctx, st, server.SecretsKeySource(cfg), testenv.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sec.Put(ctx, u.ID, "token", []byte("s3cr3t-value")); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func freshConfig(t *testing.T) server.Config {
	t.Helper()
	cfg, err := server.LoadConfig("", t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A restore checks everything before it writes anything: a damaged database copy, a
// missing or different key file, a data dir already in use and a manifest naming files
// outside the backup are each refused, naming what was wrong.
func TestRestoreRefuses(t *testing.T) {
	ctx := context.Background()
	src := smallInstall(t)
	backup, keys := filepath.Join(t.TempDir(), "b"), filepath.Join(t.TempDir(), "k")
	m, err := server.Backup(ctx, src, server.BackupOptions{Dir: backup, KeysDir: keys})
	if err != nil {
		t.Fatal(err)
	}
	if m.Database.Schema != store.SchemaVersion() {
		t.Errorf("manifest schema %d, want %d", m.Database.Schema, store.SchemaVersion())
	}
	raw, _ := os.ReadFile(filepath.Join(backup, server.ManifestName))
	if strings.Contains(string(raw), "s3cr3t") {
		t.Fatal("the manifest holds a secret")
	}

	t.Run("keys inside the backup", func(t *testing.T) {
		base := t.TempDir()
		_, err := server.Backup(ctx, src, server.BackupOptions{Dir: filepath.Join(base, "b", "inner"), KeysDir: filepath.Join(base, "b")})
		_, err2 := server.Backup(ctx, src, server.BackupOptions{Dir: backup + "2", KeysDir: backup + "2/keys"})
		for _, e := range []error{err, err2} {
			if !errors.Is(e, errdefs.ErrInvalidArgument) || !strings.Contains(e.Error(), "apart") {
				t.Errorf("keys inside the backup: %v, want ErrInvalidArgument saying apart", e)
			}
		}
	})
	t.Run("backup into a used directory", func(t *testing.T) {
		if _, err := server.Backup(ctx, src, server.BackupOptions{Dir: backup}); !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Errorf("backup into a non-empty directory: %v, want ErrAlreadyExists", err)
		}
	})
	t.Run("no keys", func(t *testing.T) {
		_, err := server.Restore(ctx, freshConfig(t), server.RestoreOptions{Dir: backup})
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), secrets.KeyFileName) {
			t.Errorf("restore without --keys: %v, want ErrInvalidArgument naming %s", err, secrets.KeyFileName)
		}
	})
	t.Run("another key", func(t *testing.T) {
		other := t.TempDir()
		if err := os.WriteFile(filepath.Join(other, secrets.KeyFileName), []byte("paddock-secrets-keyring 1\nprimary 1\nkey 1 AAAA\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := freshConfig(t)
		_, err := server.Restore(ctx, cfg, server.RestoreOptions{Dir: backup, KeysDir: other})
		if !errors.Is(err, errdefs.ErrDataLoss) || !strings.Contains(err.Error(), secrets.KeyFileName) {
			t.Errorf("restore with another key file: %v, want ErrDataLoss naming %s", err, secrets.KeyFileName)
		}
		if _, err := os.Stat(server.DatabasePath(cfg)); err == nil {
			t.Errorf("a refused restore wrote the database")
		}
	})
	t.Run("data dir in use", func(t *testing.T) {
		_, err := server.Restore(ctx, src, server.RestoreOptions{Dir: backup, KeysDir: keys})
		if !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Errorf("restore over the install itself: %v, want ErrAlreadyExists", err)
		}
	})
	t.Run("damaged database", func(t *testing.T) {
		dir := copyDir(t, backup)
		db := filepath.Join(dir, m.Database.File)
		b, _ := os.ReadFile(db)
		b[len(b)/2] ^= 1
		if err := os.WriteFile(db, b, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := server.Restore(ctx, freshConfig(t), server.RestoreOptions{Dir: dir, KeysDir: keys})
		if !errors.Is(err, errdefs.ErrDataLoss) || !strings.Contains(err.Error(), "paddock.db") {
			t.Errorf("restore of a damaged copy: %v, want ErrDataLoss naming paddock.db", err)
		}
	})
	t.Run("manifest names a file outside", func(t *testing.T) {
		dir := copyDir(t, backup)
		mm := m
		mm.Database.File = "../../etc/passwd"
		b, _ := json.Marshal(mm)
		if err := os.WriteFile(filepath.Join(dir, server.ManifestName), b, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := server.Restore(ctx, freshConfig(t), server.RestoreOptions{Dir: dir, KeysDir: keys})
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "leaves its directory") {
			t.Errorf("a manifest naming ../: %v, want ErrInvalidArgument", err)
		}
	})
	t.Run("restored", func(t *testing.T) {
		cfg := freshConfig(t)
		if _, err := server.Restore(ctx, cfg, server.RestoreOptions{Dir: backup, KeysDir: keys}); err != nil {
			t.Fatal(err)
		}
		st, err := store.Open(ctx, server.DatabasePath(cfg))
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		sec, err := secrets.Open(ctx, st, server.SecretsKeySource(cfg), testenv.Logger(t))
		if err != nil {
			t.Fatal(err)
		}
		u, err := st.UserByUsername(ctx, "alice")
		if err != nil {
			t.Fatal(err)
		}
		if v, _, err := sec.Get(ctx, u.ID, "token"); err != nil || string(v.Reveal()) != "s3cr3t-value" {
			t.Errorf("the secret after restore: %v", err)
		}
	})
}

func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy")
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o700)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// FuzzReadManifest: any bytes in manifest.json are read or refused, never a panic, and
// an accepted manifest names no file outside its directory.
func FuzzReadManifest(f *testing.F) {
	f.Add([]byte(`{"format":"paddock-backup 1","database":{"backend":"sqlite","file":"paddock.db"},"keep_apart":[{"name":"secrets.key","restore":"secrets.key"}]}`))
	f.Add([]byte(`{"format":"paddock-backup 1","database":{"backend":"postgres","file":"../x"}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, server.ManifestName), b, 0o600); err != nil {
			t.Fatal(err)
		}
		m, err := server.ReadManifest(dir)
		if err != nil {
			return
		}
		for _, n := range []string{m.Database.File} {
			if !filepath.IsLocal(n) {
				t.Fatalf("accepted a manifest naming %q", n)
			}
		}
		for _, f := range append(m.Files, m.KeepApart...) {
			if (f.Name != "" && !filepath.IsLocal(f.Name)) || (f.Restore != "" && !filepath.IsLocal(f.Restore)) {
				t.Fatalf("accepted a manifest naming %q / %q", f.Name, f.Restore)
			}
		}
	})
}
