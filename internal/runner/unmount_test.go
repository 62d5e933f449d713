package runner_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/testenv"
)

// UnmountAll detaches every mount below a directory, nested ones included, and leaves
// the directory's own mounts elsewhere alone.
func TestUnmountAll(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	outer := filepath.Join(dir, "a")
	inner := filepath.Join(outer, "b")
	if err := os.MkdirAll(outer, 0o755); err != nil {
		t.Fatal(err)
	}
	// Whatever UnmountAll does, nothing stays mounted under the test's directory.
	t.Cleanup(func() {
		_ = unix.Unmount(inner, unix.MNT_DETACH)
		_ = unix.Unmount(outer, unix.MNT_DETACH)
	})
	if err := unix.Mount("tmpfs", outer, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", inner, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	if err := runner.UnmountAll(dir); err != nil {
		t.Fatal(err)
	}
	info, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(info), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			t.Errorf("still mounted: %s", f[4])
		}
	}
}
