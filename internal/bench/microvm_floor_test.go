package bench

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/microvm"
)

// TestVMFloorBoots: table 11's floor, a bare QEMU boot of the guest kernel with a
// one-program initramfs, reaches its init's line on the console and holds memory.
func TestVMFloorBoots(t *testing.T) {
	in, err := microvm.Locate(filepath.Join(runner.InstallPrefix, "guest"))
	if err != nil {
		t.Skipf("no microVM install here: %v", err)
	}
	e := &Env{Dir: t.TempDir(), Config: runner.DefaultConfig()}
	f := e.newVMFloor(context.Background(), in, microvm.AccelTCG)
	if f.missing != "" {
		t.Fatal(f.missing)
	}
	first, rss, err := f.Boot(context.Background(), 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if first <= 0 || rss <= 0 {
		t.Errorf("first line after %s, VmRSS %d bytes: want both positive", first, rss)
	}
}
