package container

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestBundleOnItsOwnTmpfs: where the state directory is on a disk file system, a
// sandbox's bundle is written to a tmpfs of its own, which RemoveState unmounts before it
// removes the directory; where the state directory is on tmpfs already, nothing is mounted.
func TestBundleOnItsOwnTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root (CI runs as root)")
	}
	disk, err := os.MkdirTemp(".", "state-") // the checkout is on a disk, unlike /tmp on some hosts
	if err != nil {
		t.Fatal(err)
	}
	disk, _ = filepath.Abs(disk)
	t.Cleanup(func() { RemoveState(disk) })
	var st unix.Statfs_t
	if err := unix.Statfs(disk, &st); err != nil || st.Type == unix.TMPFS_MAGIC {
		t.Skipf("the checkout is on tmpfs (%v): no disk file system to test against", err)
	}
	bundle := filepath.Join(disk, "bundle")
	if err := mountBundleFS(bundle); err != nil {
		t.Fatal(err)
	}
	if err := unix.Statfs(bundle, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		t.Fatalf("the bundle is not on tmpfs: %x, %v", st.Type, err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RemoveState(disk); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(disk); !os.IsNotExist(err) {
		t.Errorf("state directory left after RemoveState: %v", err)
	}
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(info), bundle) {
		t.Errorf("the bundle's tmpfs is still mounted at %s", bundle)
	}

	shm, err := os.MkdirTemp("/dev/shm", "state-")
	if err != nil {
		t.Skipf("no /dev/shm to test a state directory on tmpfs: %v", err)
	}
	t.Cleanup(func() { RemoveState(shm) })
	if err := mountBundleFS(filepath.Join(shm, "bundle")); err != nil {
		t.Fatal(err)
	}
	if mounted(filepath.Join(shm, "bundle")) {
		t.Error("a tmpfs was mounted for a bundle whose state directory is on tmpfs already")
	}
}
