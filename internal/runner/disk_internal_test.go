package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/wire"
)

// promisedBytes counts what every image may still grow by, and the whole history budget
// of a persistent sandbox (one with a history store beside its image).
func TestPromisedBytes(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"u/disks", "u/history/sb-persistent", "v/disks"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, img := range []string{"u/disks/sb-persistent.img", "v/disks/sb-oneshotxx.img"} {
		f, err := os.Create(filepath.Join(root, img))
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(100 << 20); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write(make([]byte, 1<<20)); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	got := promisedBytes(root)
	if want := int64(2*99<<20) + wire.HistoryBudget; got < want-(1<<20) || got > want+(1<<20) {
		t.Errorf("promised %d bytes, want about %d (two images' room and one history budget)", got, want)
	}
}

// TestDiskImageFromTemplate: once one image of a size is made, the next is a copy of its
// template mounted through ioctls, with no mkfs.ext4, losetup or mount to run (PATH has
// none here). Its loop device reads the image with direct I/O and clears itself once the
// disk is unmounted; the file system is empty and writable.
func TestDiskImageFromTemplate(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a disk image needs root (CI runs as root)")
	}
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.fill()
	root := filepath.Join(cfg.WorkspaceRoot, "u", "tmp")
	if err := os.MkdirAll(root, 0o711); err != nil {
		t.Fatal(err)
	}
	r := New(cfg, slog.New(slog.DiscardHandler))
	open := func() *disk {
		t.Helper()
		id := NewID()
		d, err := r.openDisk("u", id, filepath.Join(root, id), 64<<20, true, wire.TierContainer, 1000, 1000)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.close() })
		return d
	}
	open()
	t.Setenv("PATH", t.TempDir())
	d := open()
	entries, err := os.ReadDir(d.workspace())
	if err != nil || len(entries) != 0 {
		t.Fatalf("the new disk's workspace: %v, %v; want it empty", entries, err)
	}
	if err := os.WriteFile(filepath.Join(d.workspace(), "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(d.mount, &st); err != nil {
		t.Fatal(err)
	}
	loop := fmt.Sprintf("/sys/dev/block/%d:%d/loop", unix.Major(st.Dev), unix.Minor(st.Dev))
	for name, want := range map[string]string{"dio": "1", "autoclear": "1", "backing_file": d.image} {
		got, err := os.ReadFile(filepath.Join(loop, name))
		if err != nil || strings.TrimSpace(string(got)) != want {
			t.Errorf("loop device's %s = %q (%v), want %q", name, got, err, want)
		}
	}
	if err := d.close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(loop, "backing_file")); errors.Is(err, fs.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the loop device still holds the removed image after unmount: %s", loop)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// loopsBacking lists the loop devices whose backing file is image.
func loopsBacking(image string) []string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var held []string
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && strings.TrimSpace(string(b)) == image {
			held = append(held, f)
		}
	}
	return held
}

// TestDiskAsync: a one-shot sandbox's disk opened in the background is mounted and
// prepared by the time wait returns; closed while still being mounted, it is waited for
// and then removed whole, with no mount or loop device left; refused (the reserve), wait
// says why and nothing is left either.
func TestDiskAsync(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a disk image needs root (CI runs as root)")
	}
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.fill()
	root := filepath.Join(cfg.WorkspaceRoot, "u", "tmp")
	if err := os.MkdirAll(root, 0o711); err != nil {
		t.Fatal(err)
	}
	r := New(cfg, slog.New(slog.DiscardHandler))
	gone := func(t *testing.T, d *disk) {
		t.Helper()
		if isMountPoint(d.mount) {
			t.Errorf("%s is still mounted", d.mount)
		}
		for _, p := range []string{d.mount, d.image} {
			if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s outlived the disk: %v", p, err)
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for len(loopsBacking(d.image)) > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if held := loopsBacking(d.image); len(held) > 0 {
			t.Errorf("loop devices still hold the removed image: %v", held)
		}
	}

	t.Run("mounted", func(t *testing.T) {
		id := NewID()
		d := r.openDiskAsync("u", id, filepath.Join(root, id), 64<<20, wire.TierContainer, 1000, 1000)
		if err := d.wait(); err != nil {
			t.Fatal(err)
		}
		if !isMountPoint(d.mount) {
			t.Fatalf("%s is not mounted once wait returned", d.mount)
		}
		var st unix.Stat_t
		if err := unix.Stat(d.workspace(), &st); err != nil || st.Uid != 1000 || st.Gid != 1000 {
			t.Errorf("the workspace: %+v, %v; want it made, owned by 1000:1000", st, err)
		}
		if fi, err := os.Stat(d.tmp()); err != nil || fi.Mode()&fs.ModeSticky == 0 {
			t.Errorf("tmp: %v, %v; want it made, sticky", fi, err)
		}
		if err := d.close(); err != nil {
			t.Fatal(err)
		}
		gone(t, d)
	})
	t.Run("closed while mounting", func(t *testing.T) {
		for range 3 {
			id := NewID()
			d := r.openDiskAsync("u", id, filepath.Join(root, id), 64<<20, wire.TierContainer, 1000, 1000)
			if err := d.close(); err != nil {
				t.Fatal(err)
			}
			gone(t, d)
		}
	})
	t.Run("refused", func(t *testing.T) {
		id := NewID()
		d := r.openDiskAsync("u", id, filepath.Join(root, id), 1<<50, wire.TierContainer, 1000, 1000)
		if err := d.wait(); !errors.Is(err, errdefs.ErrLimitExceeded) {
			t.Fatalf("a 1PiB disk: %v, want ErrLimitExceeded", err)
		}
		if err := d.close(); err != nil {
			t.Errorf("close of a refused disk: %v", err)
		}
		gone(t, d)
	})
}

// hasJournal reads the has_journal feature from image's ext4 superblock.
func hasJournal(t *testing.T, image string) bool {
	t.Helper()
	f, err := os.Open(image)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, 1024); err != nil {
		t.Fatal(err)
	}
	if magic := uint16(sb[0x38]) | uint16(sb[0x39])<<8; magic != 0xEF53 {
		t.Fatalf("%s: no ext4 superblock (magic %#x)", image, magic)
	}
	const compatHasJournal = 0x4
	return sb[0x5C]&compatHasJournal != 0
}

// TestDiskJournal: a persistent sandbox's image has a journal, to survive a crash; a
// one-shot sandbox's has none (it is removed with the sandbox), so it mounts without
// loading one. Both are writable ext4.
func TestDiskJournal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a disk image needs root (CI runs as root)")
	}
	cfg := DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.fill()
	root := filepath.Join(cfg.WorkspaceRoot, "u", "tmp")
	if err := os.MkdirAll(root, 0o711); err != nil {
		t.Fatal(err)
	}
	r := New(cfg, slog.New(slog.DiscardHandler))
	for _, persistent := range []bool{false, true} {
		id := NewID()
		d, err := r.openDisk("u", id, filepath.Join(root, id), 64<<20, !persistent, wire.TierContainer, 1000, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d.workspace(), "f"), []byte("x"), 0o600); err != nil {
			t.Errorf("persistent=%v: write: %v", persistent, err)
		}
		if got := hasJournal(t, d.image); got != persistent {
			t.Errorf("persistent=%v: the image has a journal: %v, want %v", persistent, got, persistent)
		}
		if persistent {
			if err := unix.Unmount(d.mount, unix.MNT_DETACH); err != nil {
				t.Error(err)
			}
			continue
		}
		if err := d.close(); err != nil {
			t.Fatal(err)
		}
	}
}
