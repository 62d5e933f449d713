package store

import (
	"context"
	"testing"
	"time"
)

// The backup bucket's leases: one retention pass at a time, and it learns which backups
// are under way; a backup waits while a pass runs, one backup of a sandbox at a time; a
// lease renewed lives on, one that lapsed is anyone's, and a holder that lost its lease
// cannot renew it.
func TestBackupLeases(t *testing.T) {
	forEachBackend(t, func(t *testing.T, db testDB) {
		ctx := context.Background()
		s := db.open(t)
		now := time.Now()
		until := now.Add(time.Minute)
		mustTake := func(sandbox, holder string, at time.Time) {
			t.Helper()
			if way, ok, err := s.LeaseBackup(ctx, sandbox, holder, at, at.Add(time.Minute)); err != nil || !ok {
				t.Fatalf("%s's backup lease for %s: in the way %+v, %v", sandbox, holder, way, err)
			}
		}
		mustTake("sb-aaaaaaaaaa", "r1/x", now)
		if way, ok, err := s.LeaseBackup(ctx, "sb-aaaaaaaaaa", "r2/y", now, until); err != nil || ok || way.Holder != "r1/x" {
			t.Fatalf("a second backup of a sandbox: ok %v, in the way %+v, %v; want r1's lease", ok, way, err)
		}
		mustTake("sb-bbbbbbbbbb", "r2/y", now)

		way, busy, ok, err := s.LeaseRetention(ctx, "r2/p", now, until)
		if err != nil || !ok || len(busy) != 2 || busy[0].Name != "sb-aaaaaaaaaa" || busy[0].Holder != "r1/x" || busy[1].Name != "sb-bbbbbbbbbb" {
			t.Fatalf("the retention lease: ok %v, in the way %+v, backups under way %+v, %v", ok, way, busy, err)
		}
		if way, _, ok, err := s.LeaseRetention(ctx, "r1/q", now, until); err != nil || ok || way.Holder != "r2/p" {
			t.Fatalf("a second pass: ok %v, in the way %+v, %v; want r2's pass", ok, way, err)
		}
		if way, ok, err := s.LeaseBackup(ctx, "sb-cccccccccc", "r1/z", now, until); err != nil || ok || way.Name != RetentionLease {
			t.Fatalf("a backup while a pass runs: ok %v, in the way %+v, %v", ok, way, err)
		}

		// The backups end; the pass renews its lease past the first expiry.
		for _, l := range []BackupLease{{Name: "sb-aaaaaaaaaa", Holder: "r1/x"}, {Name: "sb-bbbbbbbbbb", Holder: "r2/y"}} {
			if err := s.ReleaseBackupLease(ctx, l.Name, l.Holder); err != nil {
				t.Fatal(err)
			}
		}
		if ok, err := s.RenewBackupLease(ctx, RetentionLease, "r2/p", now, now.Add(3*time.Minute)); err != nil || !ok {
			t.Fatalf("renew the pass's lease: %v %v", ok, err)
		}
		if ok, err := s.RenewBackupLease(ctx, RetentionLease, "r1/q", now, now.Add(3*time.Minute)); err != nil || ok {
			t.Fatalf("another holder renewed the pass's lease: %v %v", ok, err)
		}
		later := now.Add(2 * time.Minute)
		if live, err := s.BackupLeases(ctx, later); err != nil || len(live) != 1 || live[0].Name != RetentionLease || live[0].Holder != "r2/p" {
			t.Fatalf("live leases after the backups ended: %+v, %v", live, err)
		}
		if _, ok, err := s.LeaseBackup(ctx, "sb-cccccccccc", "r1/z", later, later.Add(time.Minute)); err != nil || ok {
			t.Fatalf("a backup while the renewed pass runs: ok %v, %v", ok, err)
		}
		if err := s.ReleaseBackupLease(ctx, RetentionLease, "r1/q"); err != nil {
			t.Fatal(err)
		}
		if live, _ := s.BackupLeases(ctx, later); len(live) != 1 {
			t.Fatalf("another holder released the pass's lease: %+v", live)
		}
		if err := s.ReleaseBackupLease(ctx, RetentionLease, "r2/p"); err != nil {
			t.Fatal(err)
		}
		mustTake("sb-cccccccccc", "r1/z", later)

		// A holder that died: its lease lapses, and goes to the next taker; the dead
		// holder cannot renew it.
		dead := later.Add(2 * time.Minute)
		if _, busy, ok, err := s.LeaseRetention(ctx, "r3/p", dead, dead.Add(time.Minute)); err != nil || !ok || len(busy) != 0 {
			t.Fatalf("a pass once the backup's lease lapsed: ok %v, busy %+v, %v", ok, busy, err)
		}
		if ok, err := s.RenewBackupLease(ctx, "sb-cccccccccc", "r1/z", dead, dead.Add(time.Minute)); err != nil || ok {
			t.Fatalf("a lapsed lease renewed: %v %v", ok, err)
		}
		if _, _, ok, _ := s.LeaseRetention(ctx, "r1/q", dead.Add(2*time.Minute), dead.Add(3*time.Minute)); !ok {
			t.Fatal("a pass once the dead pass's lease lapsed was refused")
		}
	})
}
