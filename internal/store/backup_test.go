package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/store/pgtest"
)

// A backup taken while a writer commits transactions of two events each is a copy as of
// one commit: it opens, holds whole transactions only, and the writer is never stopped.
func TestBackupWhileWriting(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		target := db.target(t)
		s, err := Open(context.Background(), target)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ctx, cancel := context.WithCancel(context.Background())
		var written atomic.Int64
		done := make(chan error, 1)
		go func() {
			for ctx.Err() == nil {
				if err := s.Audit(ctx, AuditEvent{At: t0, Action: "a.one", Target: "sb-a"}, AuditEvent{At: t0, Action: "a.two", Target: "sb-a"}); err != nil {
					if ctx.Err() != nil {
						break
					}
					done <- err
					return
				}
				written.Add(1)
			}
			done <- nil
		}()
		for written.Load() < 20 {
			time.Sleep(time.Millisecond)
		}
		dst := filepath.Join(t.TempDir(), "copy")
		var copyTarget string
		if IsPostgresURL(target) {
			if err := BackupPostgres(context.Background(), target, dst); err != nil {
				t.Fatal(err)
			}
			copyTarget = pgtest.URL(t)
			if err := RestorePostgres(context.Background(), copyTarget, dst); err != nil {
				t.Fatal(err)
			}
			// A second restore into a database that now has paddock's tables is refused.
			if err := RestorePostgres(context.Background(), copyTarget, dst); !errors.Is(err, errdefs.ErrAlreadyExists) {
				t.Errorf("restore over a paddock database: %v, want ErrAlreadyExists", err)
			}
		} else {
			v, err := BackupSQLite(context.Background(), target, dst)
			if err != nil || v != SchemaVersion() {
				t.Fatalf("BackupSQLite = %d, %v; want schema %d", v, err, SchemaVersion())
			}
			if st, _ := os.Stat(dst); st.Mode().Perm() != 0o600 {
				t.Errorf("the copy is %v, want 0600", st.Mode().Perm())
			}
			if _, err := BackupSQLite(context.Background(), target, dst); !errors.Is(err, errdefs.ErrAlreadyExists) {
				t.Errorf("a backup over an existing file: %v, want ErrAlreadyExists", err)
			}
			copyTarget = dst
		}
		atBackup := written.Load()
		// The writer goes on after the backup.
		for written.Load() < atBackup+5 {
			time.Sleep(time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("the writer failed during the backup: %v", err)
		}
		c, err := Open(context.Background(), copyTarget)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var n int64
		if err := c.r.QueryRowContext(context.Background(), `SELECT count(*) FROM audit_events WHERE target = 'sb-a'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n < 40 || n%2 != 0 {
			t.Errorf("the copy holds %d events: want at least 40, in whole transactions of 2", n)
		}
	})
}

// A file that is not a paddock database, or a damaged one, is refused as a copy.
func TestCheckSQLiteCopyRefusesDamage(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, filepath.Join(dir, "paddock.db"))
	if err != nil {
		t.Fatal(err)
	}
	mustUser(t, s, "alice")
	s.Close()
	good := filepath.Join(dir, "good.db")
	if _, err := BackupSQLite(ctx, filepath.Join(dir, "paddock.db"), good); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	// Damage a b-tree page's header past the file header.
	for i := 4096; i < 4096+64 && i < len(b); i++ {
		b[i] ^= 0xff
	}
	bad := filepath.Join(dir, "bad.db")
	if err := os.WriteFile(bad, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckSQLiteCopy(ctx, bad); !errors.Is(err, errdefs.ErrDataLoss) {
		t.Errorf("a damaged copy: %v, want ErrDataLoss", err)
	}
	other := filepath.Join(dir, "other.db")
	if err := os.WriteFile(other, []byte("not a database at all, just text"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckSQLiteCopy(ctx, other); !errors.Is(err, errdefs.ErrDataLoss) {
		t.Errorf("a text file: %v, want ErrDataLoss", err)
	}
	if _, err := BackupSQLite(ctx, filepath.Join(dir, "absent.db"), filepath.Join(dir, "x.db")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("no source database: %v, want ErrNotFound", err)
	}
}
