package history

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// smallDisk mounts a 1 MiB tmpfs at a new directory, so a test can fill a disk for real.
func smallDisk(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs to fill a disk needs root (CAP_SYS_ADMIN)")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("mount tmpfs (needs CAP_SYS_ADMIN): %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// bigFile is content larger than smallDisk holds.
var bigFile = strings.Repeat("0123456789abcdef", 2<<16) // 2 MiB

// A disk that fills during a checkpoint: the checkpoint fails saying the store is out of
// space, the workspace is untouched, the past is intact, and freeing space is enough.
func TestStoreFullDuringCheckpoint(t *testing.T) {
	store := filepath.Join(smallDisk(t), "history")
	ws := t.TempDir()
	h := open(t, ws, store)
	write(t, ws, "a", "one", 0o644)
	first := mustCheckpoint(t, h, "one")
	write(t, ws, "a", "two", 0o644)
	second := mustCheckpoint(t, h, "two")

	write(t, ws, "big", bigFile, 0o600)
	before := snapshot(t, ws)
	_, _, err := h.Checkpoint(CauseManual, "too big")
	t.Logf("checkpoint on a full store: %v", err)
	if err == nil {
		t.Fatal("checkpoint of a workspace larger than the store's disk succeeded")
	}
	if !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, errdefs.ErrLimitExceeded) {
		t.Errorf("error %v, want ENOSPC and ErrLimitExceeded", err)
	}
	for _, want := range []string{"history store", "no space", "untouched"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if got := snapshot(t, ws); !mapsEqual(got, before) {
		t.Error("the workspace changed during a failed checkpoint")
	}
	if l := h.List(); len(l) != 2 || l[1].ID != first.ID || l[0].ID != second.ID {
		t.Fatalf("history after the failure: %+v, want the two checkpoints", l)
	}
	if entries, _ := os.ReadDir(filepath.Join(store, tmpDir)); len(entries) != 0 {
		t.Errorf("half-written blobs left in the store: %v", entries)
	}

	// The past still restores (with the big file set aside: it cannot be recorded first).
	if err := os.Rename(filepath.Join(ws, "big"), filepath.Join(t.TempDir(), "big")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Restore(first.ID); err != nil {
		t.Fatalf("restore after a full store: %v", err)
	}
	if got := snapshot(t, ws)["a"].data; got != "one" {
		t.Fatalf("restored a = %q, want one", got)
	}
	// With room again (a smaller file), checkpoints work.
	write(t, ws, "big", bigFile[:64<<10], 0o600)
	mustCheckpoint(t, h, "fits")
}

// A restore that fills the workspace's disk stops with an error saying so; the journal
// keeps it pending, nothing else may record the half-restored workspace, and once there is
// room the next operation finishes it: the workspace ends wholly the restored checkpoint.
// (The library rolls forward; it does not roll back.)
func TestWorkspaceFullDuringRestore(t *testing.T) {
	disk, store := smallDisk(t), t.TempDir()
	ws := filepath.Join(disk, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	h := open(t, ws, store)
	write(t, ws, "a", "old", 0o644)
	write(t, ws, "big", bigFile[:700<<10], 0o644)
	bigCk := mustCheckpoint(t, h, "big")
	want := snapshot(t, ws)
	if err := os.Remove(filepath.Join(ws, "big")); err != nil {
		t.Fatal(err)
	}
	write(t, ws, "a", "new", 0o644)
	mustCheckpoint(t, h, "small")
	// Something else on the workspace's disk takes the room the restore needs.
	filler := filepath.Join(disk, "filler")
	write(t, disk, "filler", bigFile[:500<<10], 0o644)

	_, err := h.Restore(bigCk.ID)
	t.Logf("restore on a full disk: %v", err)
	if err == nil {
		t.Skip("the restore fit on the small disk; this test needs it not to")
	}
	if !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, errdefs.ErrLimitExceeded) {
		t.Errorf("error %v, want ENOSPC and ErrLimitExceeded", err)
	}
	for _, s := range []string{"restore to checkpoint", `restore "big"`, "disk is full", "no space", "journal finishes it"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not say %q", err, s)
		}
	}
	if _, err := os.Stat(filepath.Join(store, journalFile)); err != nil {
		t.Fatalf("no journal after a failed restore: %v", err)
	}
	// Nothing records the half-restored workspace while the disk is still full.
	if _, _, err := h.Checkpoint(CauseExec, ""); err == nil || !strings.Contains(err.Error(), "stopped partway") {
		t.Fatalf("checkpoint while the restore is pending: %v, want refused naming it", err)
	}
	if n := len(h.List()); n != 2 {
		t.Fatalf("history has %d checkpoints while the restore is pending, want 2", n)
	}

	// Room again (something outside history freed it): the next call finishes the restore.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.Checkpoint(CauseExec, ""); err != nil {
		t.Fatalf("checkpoint once there is room: %v", err)
	}
	if got := snapshot(t, ws); !mapsEqual(got, want) {
		t.Errorf("workspace after the restore finished: %v, want wholly checkpoint %s", keys(got), bigCk.ID)
	}
}

func keys(m map[string]node) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
