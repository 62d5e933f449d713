package history

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestForkLayer: a layered fork's metadata tree, mounted over its store's objects as an
// overlay, reads as the checkpoint's workspace (contents, modes, symlinks); a write goes
// to the upper directory and leaves the shared blob, and so the source's history, as it
// was.
func TestForkLayer(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: trusted xattrs and an overlay mount")
	}
	ws, store := t.TempDir(), t.TempDir()
	h := open(t, ws, store)
	write(t, ws, "a.txt", "one", 0o644)
	write(t, ws, "bin/run.sh", "#!/bin/sh\n", 0o755)
	write(t, ws, "empty", "", 0o600)
	if err := os.Symlink("a.txt", filepath.Join(ws, "link")); err != nil {
		t.Fatal(err)
	}
	first := mustCheckpoint(t, h, "first")
	want := snapshot(t, ws)
	write(t, ws, "a.txt", "two", 0o644)
	mustCheckpoint(t, h, "second")

	base := t.TempDir()
	dst, meta := filepath.Join(base, "store"), filepath.Join(base, "meta")
	info, err := ForkLayer(store, dst, first.ID, meta, os.Getuid(), os.Getgid())
	if err != nil {
		t.Fatal(err)
	}
	if info.At.ID != first.ID || info.Files != 3 || info.Linked+info.Cloned == 0 {
		t.Errorf("layer info %+v", info)
	}
	upper, work, mnt := filepath.Join(base, "upper"), filepath.Join(base, "work"), filepath.Join(base, "mnt")
	for _, d := range []string{upper, work, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := "metacopy=on,redirect_dir=on,lowerdir=" + meta + "::" + filepath.Join(dst, objectsDir) + ",upperdir=" + upper + ",workdir=" + work
	if err := unix.Mount("overlay", mnt, "overlay", 0, opts); err != nil {
		t.Skipf("this kernel has no overlay with data-only layers: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	if got := snapshot(t, mnt); !mapsEqual(got, want) {
		t.Fatalf("the layered workspace:\n got %v\nwant %v", got, want)
	}
	write(t, mnt, "a.txt", "fork's own", 0o644)
	if b, _ := os.ReadFile(filepath.Join(upper, "a.txt")); string(b) != "fork's own" {
		t.Errorf("the write is not in the upper directory: %q", b)
	}
	if _, err := h.Restore(first.ID); err != nil {
		t.Fatalf("the source's restore after the fork's write: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "a.txt")); string(b) != "one" {
		t.Errorf("the source restored %q, want its own \"one\"", b)
	}
}
