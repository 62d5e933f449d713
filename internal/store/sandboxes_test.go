package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
)

func mustSandbox(t *testing.T, s *Store, userID, id, name string) {
	t.Helper()
	now := time.Now()
	err := s.Update(context.Background(), func(tx *Tx) error {
		return tx.CreateSandbox(context.Background(), Sandbox{ID: id, UserID: userID, Name: name, Tier: "container",
			State: "running", MemoryBytes: 256 << 20, App: App{Command: []string{"app"}, Port: 8080, Build: "b1"},
			CreatedAt: now, UpdatedAt: now})
	})
	if err != nil {
		t.Fatalf("create sandbox %s: %v", id, err)
	}
}

func TestSandboxesRoundTripAndUsage(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		s := db.open(t)
		alice, bob := mustUser(t, s, "alice"), mustUser(t, s, "bob")
		mustSandbox(t, s, alice.ID, "sb-a1", "one")
		mustSandbox(t, s, alice.ID, "sb-a2", "two")
		mustSandbox(t, s, bob.ID, "sb-b1", "one")

		got, err := s.SandboxByID(ctx, "sb-a1")
		if err != nil || got.Username != "alice" || got.App.Port != 8080 || got.App.Build != "b1" || got.App.Command[0] != "app" || len(got.Env) != 0 {
			t.Fatalf("SandboxByID = %+v, %v", got, err)
		}
		if list, _ := s.ListSandboxes(ctx, alice.ID); len(list) != 2 {
			t.Errorf("alice sees %d sandboxes, want 2", len(list))
		}
		if list, _ := s.ListSandboxes(ctx, ""); len(list) != 3 {
			t.Errorf("all: %d sandboxes, want 3", len(list))
		}
		err = s.Update(ctx, func(tx *Tx) error {
			return tx.CreateSandbox(ctx, Sandbox{ID: "sb-a3", UserID: alice.ID, Name: "one", Tier: "container", State: "running"})
		})
		if !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Errorf("duplicate name: %v, want ErrAlreadyExists", err)
		}
		// The text reaches the client: the name, not the database's tables and columns.
		if msg := err.Error(); msg != `sandbox "one": already exists` {
			t.Errorf("duplicate name says %q, want the name and the class alone", msg)
		}
		_ = s.Update(ctx, func(tx *Tx) error {
			u, err := tx.UserUsage(ctx, alice.ID)
			if err != nil || u.Sandboxes != 2 || u.MemoryBytes != 512<<20 {
				t.Errorf("usage = %+v, %v", u, err)
			}
			return nil
		})
		if _, err := s.SandboxByID(ctx, "sb-nope"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("missing sandbox: %v", err)
		}
	})
}

func TestRolesSwapAndDeleteClearsPointer(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		s := db.open(t)
		alice := mustUser(t, s, "alice")
		mustSandbox(t, s, alice.ID, "sb-live", "live")
		mustSandbox(t, s, alice.ID, "sb-dev", "dev")
		now := time.Now()
		err := s.Update(ctx, func(tx *Tx) error {
			if _, err := tx.SwapRoles(ctx, alice.ID, now); !errors.Is(err, errdefs.ErrFailedPrecondition) {
				t.Errorf("swap without roles: %v", err)
			}
			if err := tx.SetRole(ctx, alice.ID, "live", "sb-live", now); err != nil {
				return err
			}
			if err := tx.SetRole(ctx, alice.ID, "bogus", "sb-dev", now); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("bogus role: %v", err)
			}
			return tx.SetRole(ctx, alice.ID, "dev", "sb-dev", now)
		})
		if err != nil {
			t.Fatal(err)
		}
		var after Roles
		err = s.Update(ctx, func(tx *Tx) (err error) { after, err = tx.SwapRoles(ctx, alice.ID, now); return err })
		if err != nil || after.LiveID != "sb-dev" || after.DevID != "sb-live" || after.Generation != 1 {
			t.Fatalf("after swap: %+v, %v", after, err)
		}
		if err := s.Update(ctx, func(tx *Tx) error { return tx.DeleteSandbox(ctx, "sb-dev") }); err != nil {
			t.Fatal(err)
		}
		r, err := s.RolesOf(ctx, alice.ID)
		if err != nil || r.LiveID != "" || r.DevID != "sb-live" || r.Generation != 1 {
			t.Errorf("after deleting the live sandbox: %+v, %v", r, err)
		}
		if all, _ := s.AllRoles(ctx); len(all) != 1 {
			t.Errorf("AllRoles = %v", all)
		}
	})
}

func TestSandboxLimitsRoundTrip(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		s := db.open(t)
		alice := mustUser(t, s, "alice")
		now := time.Now()
		sb := Sandbox{ID: "sb-a1", UserID: alice.ID, Name: "one", Tier: "container", State: "stopped",
			MemoryBytes: 64 << 20, Pids: 32, TmpBytes: 8 << 20, FileSizeBytes: 1 << 20, CreatedAt: now, UpdatedAt: now}
		if err := s.Update(ctx, func(tx *Tx) error { return tx.CreateSandbox(ctx, sb) }); err != nil {
			t.Fatal(err)
		}
		if got, err := s.SandboxByID(ctx, sb.ID); err != nil || got.TmpBytes != 8<<20 || got.FileSizeBytes != 1<<20 || got.Pids != 32 {
			t.Fatalf("SandboxByID = %+v, %v; want tmp 8MiB, file size 1MiB, pids 32", got, err)
		}
		sb.MemoryBytes, sb.CPUs, sb.Pids, sb.TmpBytes, sb.FileSizeBytes = 128<<20, 0.5, 64, 16<<20, 2<<20
		if err := s.Update(ctx, func(tx *Tx) error { return tx.SetSandboxLimits(ctx, sb, now) }); err != nil {
			t.Fatal(err)
		}
		got, err := s.SandboxByID(ctx, sb.ID)
		if err != nil || got.MemoryBytes != 128<<20 || got.CPUs != 0.5 || got.Pids != 64 || got.TmpBytes != 16<<20 || got.FileSizeBytes != 2<<20 {
			t.Fatalf("after SetSandboxLimits: %+v, %v", got, err)
		}
		err = s.Update(ctx, func(tx *Tx) error { return tx.SetSandboxLimits(ctx, Sandbox{ID: "sb-missing"}, now) })
		if !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("SetSandboxLimits of a missing sandbox = %v, want ErrNotFound", err)
		}
	})
}

// TestQuotaCheckAtomicAcrossProcesses: a quota counted and a sandbox made in one
// transaction hold together even when two processes (two Stores on one database, as two
// replicas would be) race for the last slot: exactly the quota's number is made.
func TestQuotaCheckAtomicAcrossProcesses(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		target := db.target(t)
		var stores [2]*Store
		for i := range stores {
			s, err := Open(ctx, target)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			stores[i] = s
		}
		alice := mustUser(t, stores[0], "alice")
		const quota, tries = 2, 8
		var wg sync.WaitGroup
		var made atomic.Int32
		for i := range tries {
			s := stores[i%2]
			wg.Go(func() {
				err := s.Update(ctx, func(tx *Tx) error {
					u, err := tx.UserUsage(ctx, alice.ID)
					if err != nil {
						return err
					}
					if u.Sandboxes >= quota {
						return errdefs.ErrLimitExceeded
					}
					// Widen the window between the count and the insert, where another
					// process's transaction would count the same number.
					time.Sleep(20 * time.Millisecond)
					now := time.Now()
					return tx.CreateSandbox(ctx, Sandbox{ID: fmt.Sprintf("sb-%d", i), UserID: alice.ID, Name: fmt.Sprintf("n%d", i),
						Tier: "container", State: "running", CreatedAt: now, UpdatedAt: now})
				})
				switch {
				case err == nil:
					made.Add(1)
				case !errors.Is(err, errdefs.ErrLimitExceeded):
					t.Errorf("create: %v", err)
				}
			})
		}
		wg.Wait()
		list, err := stores[1].ListSandboxes(ctx, alice.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != quota || made.Load() != quota {
			t.Errorf("%d sandboxes made (%d reported), want the quota's %d", len(list), made.Load(), quota)
		}
	})
}
