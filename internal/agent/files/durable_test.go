package files

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func TestReplaceIsOrdered(t *testing.T) {
	tests := []struct {
		fstype, opts string
		want         bool
	}{
		{"ext4", "rw,discard", true},
		{"ext4", "rw,data=ordered", true},
		{"ext4", "rw,data=journal", true},
		{"ext4", "rw,noauto_da_alloc", false},
		{"ext4", "rw,data=writeback,discard", false},
		{"ext3", "rw", false},
		{"xfs", "rw,attr2,inode64", false},
		{"tmpfs", "rw,size=1024k", false},
		{"9p", "rw,trans=virtio", false},
		{"", "", false},
	}
	for _, tt := range tests {
		if got := replaceIsOrdered(tt.fstype, tt.opts); got != tt.want {
			t.Errorf("replaceIsOrdered(%q, %q) = %v, want %v", tt.fstype, tt.opts, got, tt.want)
		}
	}
}

// TestRenameFirstOn asks the kernel's mount table about real mounts: an ext4 image mounted
// with its defaults and with noauto_da_alloc, and a tmpfs, each for a directory below it.
func TestRenameFirstOn(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("mounting a file system needs root")
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		t.Skip("mkfs.ext4 is not installed (e2fsprogs)")
	}
	base := t.TempDir()
	img := filepath.Join(base, "ext4.img")
	if out, err := exec.Command(mkfs, "-q", "-F", img, "16M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	mountAt := func(name string, args ...string) string {
		t.Helper()
		dir := filepath.Join(base, name)
		must(t, os.Mkdir(dir, 0o755))
		if out, err := exec.Command("mount", append(args, dir)...).CombinedOutput(); err != nil {
			t.Fatalf("mount %v %s: %v: %s", args, dir, err, out)
		}
		t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
		sub := filepath.Join(dir, "workspace", "src")
		must(t, os.MkdirAll(sub, 0o755))
		return sub
	}
	if dir := mountAt("ordered", "-o", "loop", img); !renameFirstOn(dir) {
		t.Errorf("ext4 with its defaults: renameFirstOn(%s) = false, want true", dir)
	}
	img2 := filepath.Join(base, "ext4-2.img")
	if out, err := exec.Command(mkfs, "-q", "-F", img2, "16M").CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	if dir := mountAt("noauto", "-o", "loop,noauto_da_alloc", img2); renameFirstOn(dir) {
		t.Errorf("ext4 with noauto_da_alloc: renameFirstOn(%s) = true, want false", dir)
	}
	if dir := mountAt("tmpfs", "-t", "tmpfs", "tmpfs"); renameFirstOn(dir) {
		t.Errorf("tmpfs: renameFirstOn(%s) = true, want false", dir)
	}
}
