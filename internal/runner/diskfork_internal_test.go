package runner

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/testenv/xfs"
	"github.com/paddockhq/paddock/internal/wire"
)

// TestCopyDiskFreezes: a copy of a mounted image holds what was written to its file system
// just before, not yet on the image (the freeze flushes it), and is a clean file system
// that mounts on its own; a writer of the source waits out the copy and then goes on; the
// copy is as sparse as its source; and a file system a dead fork left frozen is thawed.
func TestCopyDiskFreezes(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a disk image needs root (CI runs as root)")
	}
	dir := t.TempDir()
	t.Cleanup(func() { _ = UnmountAll(dir) })
	src, mount := filepath.Join(dir, "src.img"), filepath.Join(dir, "src")
	if err := formatImage(src, 1<<30); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(mount, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := mountImage(src, mount); err != nil {
		t.Fatal(err)
	}
	// Written, not synced: in the page cache of the source's file system, not on its image.
	want := bytes.Repeat([]byte("paddock "), 1<<20)
	if err := os.WriteFile(filepath.Join(mount, "data"), want, 0o600); err != nil {
		t.Fatal(err)
	}

	dst := filepath.Join(dir, "dst.img")
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := copyDisk(src, mount, out, false, nil); err != nil {
		t.Fatal(err)
	}
	out.Close()
	copyMount := filepath.Join(dir, "dst")
	if err := os.Mkdir(copyMount, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := mountImage(dst, copyMount); err != nil {
		t.Fatalf("the copy does not mount: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(copyMount, "data")); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the copy lacks what was written before it (%d bytes, %v): the source was not flushed", len(got), err)
	}
	var s, d syscall.Stat_t
	if err := syscall.Stat(src, &s); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(dst, &d); err != nil {
		t.Fatal(err)
	}
	if d.Size != s.Size || d.Blocks > s.Blocks+(4<<20)/512 {
		t.Errorf("the copy is %d bytes with %d allocated, its source %d with %d: not a sparse copy", d.Size, d.Blocks*512, s.Size, s.Blocks*512)
	}

	// The source thawed: a write goes through.
	if err := os.WriteFile(filepath.Join(mount, "after"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}

	// A fork that died with the source frozen: its writer waits until the next mount or
	// adoption thaws it.
	f, err := os.Open(mount)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.IoctlSetInt(int(f.Fd()), fiFreeze, 0); err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() { wrote <- os.WriteFile(filepath.Join(mount, "blocked"), []byte("x"), 0o600) }()
	select {
	case err := <-wrote:
		t.Fatalf("a write to a frozen file system went through (%v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := thaw(mount); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		_ = unix.IoctlSetInt(int(f.Fd()), fiThaw, 0)
		t.Fatal("the write still waits a minute after thaw: the file system was not thawed")
	}
	if err := thaw(mount); err != nil {
		t.Errorf("thawing a file system not frozen: %v", err)
	}
}

// TestCopyDiskProves: the proof runs on the source's workspace while its file system is
// frozen, and its answer is the copy's; an image not mounted is not proven, the proof not
// run.
func TestCopyDiskProves(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a disk image needs root (CI runs as root)")
	}
	dir := t.TempDir()
	t.Cleanup(func() { _ = UnmountAll(dir) })
	src, mount := filepath.Join(dir, "src.img"), filepath.Join(dir, "src")
	if err := formatImage(src, 256<<20); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(mount, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := mountImage(src, mount); err != nil {
		t.Fatal(err)
	}
	copyOnce := func(answer bool) (proven bool, saw string, frozen error) {
		out, err := os.CreateTemp(dir, "dst-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.Remove(out.Name())
		defer out.Close()
		proven, err = copyDisk(src, mount, out, false, func(ws string) bool {
			saw = ws
			// Frozen already: a second freeze is refused.
			f, err := os.Open(mount)
			if err != nil {
				frozen = err
				return answer
			}
			defer f.Close()
			frozen = unix.IoctlSetInt(int(f.Fd()), fiFreeze, 0)
			if frozen == nil {
				_ = unix.IoctlSetInt(int(f.Fd()), fiThaw, 0)
			}
			return answer
		})
		if err != nil {
			t.Fatal(err)
		}
		return proven, saw, frozen
	}
	for _, answer := range []bool{true, false} {
		proven, saw, frozen := copyOnce(answer)
		if proven != answer || saw != filepath.Join(mount, "workspace") {
			t.Errorf("proof answering %v: copy says %v, proof ran on %q", answer, proven, saw)
		}
		if !errors.Is(frozen, unix.EBUSY) {
			t.Errorf("the proof ran on a file system not frozen (a second freeze: %v)", frozen)
		}
	}
	if err := unmount(mount); err != nil {
		t.Fatal(err)
	}
	out, err := os.Create(filepath.Join(dir, "unmounted.img"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	ran := false
	proven, err := copyDisk(src, mount, out, false, func(string) bool { ran = true; return true })
	if err != nil || proven || ran {
		t.Errorf("an image not mounted: proven %v, proof ran %v, %v", proven, ran, err)
	}
}

// TestCopyDiskReflinks: where the workspace root is on a file system with reflinks (XFS,
// as a host's may be), a sandbox's image, a reflinked copy of its template, mounts; and a
// fork's copy of it shares its blocks: the file system's used space grows by a small part
// of the image's data, and the copy mounts and holds the data. The disk is small (mkfs
// would give it 1 KiB blocks, which a loop device over a reflinked file cannot hold).
func TestCopyDiskReflinks(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a disk image needs root (CI runs as root)")
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "xfs")
	if err := xfs.Mount(t.Context(), filepath.Join(dir, "xfs.img"), root, 8<<30); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = UnmountAll(dir) })

	cfg := DefaultConfig()
	cfg.DataDir = root
	cfg.fill()
	r := New(cfg, slog.New(slog.DiscardHandler))
	if _, err := r.ProvisionUser("u"); err != nil {
		t.Fatal(err)
	}
	id := NewID()
	d, err := r.openDisk("u", id, filepath.Join(cfg.WorkspaceRoot, "u", "sandboxes", id), 256<<20, false, wire.TierContainer, 1000, 1000)
	if err != nil {
		t.Fatalf("a sandbox's disk on XFS: %v", err)
	}
	want := make([]byte, 64<<20)
	for i := range want {
		want[i] = byte(i*7 + i>>12)
	}
	if err := os.WriteFile(filepath.Join(d.workspace(), "data"), want, 0o600); err != nil {
		t.Fatal(err)
	}
	used := func() int64 {
		var st unix.Statfs_t
		if err := unix.Statfs(root, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Blocks-st.Bfree) * st.Bsize
	}
	// The freeze writes the source's data to its image: counted before the copy.
	thaw, err := freeze(d.mount)
	if err != nil {
		t.Fatal(err)
	}
	thaw()
	before := used()

	dst := filepath.Join(root, "dst.img")
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := copyDisk(d.image, d.mount, out, true, nil); err != nil {
		t.Fatal(err)
	}
	out.Close()
	if grew := used() - before; grew > 8<<20 {
		t.Errorf("the copy took %d bytes of the file system for an image holding %d: not a reflink", grew, len(want))
	}
	copyMount := filepath.Join(root, "dst")
	if err := os.Mkdir(copyMount, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := mountImage(dst, copyMount); err != nil {
		t.Fatalf("the copy does not mount: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(copyMount, "workspace", "data")); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the copy's data: %d bytes, %v", len(got), err)
	}
}
