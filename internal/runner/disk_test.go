package runner_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/testenv"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// diskFill writes past a 128MiB disk every way a command might: fallocate, dd, and (in a
// container) dd into /tmp, which is on the same disk.
const diskFill = `cd /workspace 2>/dev/null || cd "$PWD"
fallocate -l 1G big 2>/dev/null; echo fallocate=$?; rm -f big
dd if=/dev/zero of=f bs=1M count=300 2>/dev/null; echo dd=$?; rm -f f
dd if=/dev/zero of=/tmp/t bs=1M count=300 2>/dev/null; echo tmp=$?
df -k /tmp | tail -1 >&2`

// TestDiskLimit: in every tier, Limits.Disk is a file system of its own for the sandbox's
// workspace (and, in a container, its /tmp): fallocate and dd past it fail inside with
// ENOSPC, the host's disk holds no more than the limit for it meanwhile, the run says the
// disk is full, and what the sandbox deletes goes back to the host.
func TestDiskLimit(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		if h.onCluster {
			t.Skip("a cluster sandbox's disk is its volume claim's size, which the storage class enforces (the test cluster's hostPath provisioner enforces none), or its emptyDir's sizeLimit, which the kubelet enforces by evicting the pod, not with ENOSPC")
		}
		const limit = 128 << 20
		spec := h.spec("sh", "-c", diskFill)
		spec.Limits.Disk = limit
		o := h.run(spec, "")
		want := "fallocate=1\ndd=1\ntmp=1\n"
		tmpOnDisk := h.tier == wire.TierContainer // the others' /tmp is their own: the host's, the guest's
		if !tmpOnDisk {
			o.stdout = strings.Replace(o.stdout, "tmp=0", "tmp=1", 1)
		}
		if o.stdout != want {
			t.Errorf("past a 128MiB disk: stdout %q (stderr %q), want %q", o.stdout, o.stderr, want)
		}
		if tmpOnDisk && !o.res.DiskFull {
			t.Errorf("the run does not say the disk is full: %+v", o.res)
		}
		if !h.inCtr {
			return // the process tier runs no exec but its main command
		}

		// Held at its fullest: the host's file holds no more than the limit.
		spec = h.spec("sh", "-c", "dd if=/dev/zero of=/workspace/f bs=1M count=300 2>/dev/null; sync; sleep 600")
		spec.Limits.Disk = limit
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		sb, err := h.r.Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Destroy(context.Background())
		img := filepath.Join(h.cfg.WorkspaceRoot, "conf", "disks", sb.ID+".img")
		var used int64
		for deadline := time.Now().Add(90 * time.Second); time.Now().Before(deadline) && !sb.DiskFull(); {
			time.Sleep(100 * time.Millisecond)
		}
		if !sb.DiskFull() {
			t.Fatal("the sandbox's disk never filled")
		}
		var st syscall.Stat_t
		if err := syscall.Stat(img, &st); err != nil {
			t.Fatalf("the sandbox's disk image: %v", err)
		}
		if used = st.Blocks * 512; used > limit {
			t.Errorf("the host holds %d bytes for a sandbox with a %d-byte disk", used, limit)
		}
		// Deleted inside: given back to the host (discard).
		res, err := sb.Agent().Process().Execute(ctx, &pb.ExecuteRequest{Argv: []string{"sh", "-c", "rm /workspace/f; sync"}})
		if err != nil || res.GetStatus().GetExitCode() != 0 {
			t.Fatalf("rm: %v %+v", err, res)
		}
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if syscall.Stat(img, &st) == nil && st.Blocks*512 < used/2 {
				break
			}
		}
		if st.Blocks*512 >= used/2 {
			t.Errorf("the image still holds %d bytes after the sandbox deleted its %d", st.Blocks*512, used)
		}
		if sb.DiskFull() {
			t.Error("DiskFull after the file was deleted")
		}
		if err := sb.Destroy(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(img); !os.IsNotExist(err) {
			t.Errorf("a one-shot sandbox's image outlived it: %v", err)
		}
	})
}

// TestDiskReserve: a sandbox whose disk, with every other disk full, would leave less than
// the reserve free on the host's file system is refused, naming the reserve; a smaller one
// that leaves it is not.
func TestDiskReserve(t *testing.T) {
	testenv.RequireRoot(t)
	cfg := testenv.Config(t)
	if err := os.MkdirAll(cfg.WorkspaceRoot, 0o711); err != nil {
		t.Fatal(err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(cfg.WorkspaceRoot, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	if free < 4<<30 {
		t.Skipf("the workspaces' file system has %d bytes free; the test needs 4GiB", free)
	}
	// 2GiB above the reserve: room enough for the control's disk while other tests write.
	cfg.DiskReserve = wire.Size(free - 2<<30)
	r := runner.New(cfg, testenv.Logger(t))
	spec := runner.Spec{User: "rita", Tier: wire.TierContainer, Main: []string{"true"}, Limits: wire.Limits{Disk: 3 << 30}}
	_, err := r.Run(tctx(t), spec, runner.Stdio{}, false)
	if !errors.Is(err, errdefs.ErrLimitExceeded) || !strings.Contains(err.Error(), "reserved for the control plane") {
		t.Fatalf("a 3GiB disk with 2GiB left above the reserve: %v, want ErrLimitExceeded naming the reserve", err)
	}
	// The disk is made while the container's bundle is written: the refusal undoes that too.
	if left, _ := os.ReadDir(filepath.Join(cfg.StateDir, "sandboxes")); len(left) > 0 {
		t.Errorf("a refused sandbox left its state behind: %v", left)
	}
	noDiskImages(t, cfg)
	spec.Limits.Disk = 256 << 20
	if res, err := r.Run(tctx(t), spec, runner.Stdio{}, false); err != nil || res.ExitCode() != 0 {
		t.Fatalf("CONTROL FAILED: a 256MiB disk with 2GiB left above the reserve: %+v, %v", res, err)
	}
	noDiskImages(t, cfg)
}

// TestPersistentDisk: a persistent sandbox's disk keeps its files across Destroy and a new
// start, grows (online) when its limit is raised, and is removed with its mount by
// RemoveWorkspace.
func TestPersistentDisk(t *testing.T) {
	testenv.RequireRoot(t)
	cfg := testenv.Config(t)
	r := runner.New(cfg, testenv.Logger(t))
	id := runner.NewID()
	spec := runner.Spec{ID: id, Persistent: true, User: "pat", Tier: wire.TierContainer, Main: []string{"sleep", "600"}, Limits: wire.Limits{Disk: 96 << 20}}
	var sizes []int
	for i, script := range []string{"echo kept > /workspace/f; df -k /workspace | tail -1", "cat /workspace/f; df -k /workspace | tail -1", "cat /workspace/f; df -k /workspace | tail -1"} {
		if i == 2 {
			spec.Limits.Disk = 192 << 20
		}
		sb, err := r.Create(tctx(t), spec)
		if err != nil {
			t.Fatal(err)
		}
		res, err := sb.Agent().Process().Execute(tctx(t), &pb.ExecuteRequest{Argv: []string{"sh", "-c", script}})
		sb.Destroy(context.Background())
		if err != nil || res.GetStatus().GetExitCode() != 0 {
			t.Fatalf("start %d: %v %+v", i, err, res)
		}
		out := strings.Fields(string(res.Stdout))
		if i > 0 && out[0] != "kept" {
			t.Errorf("start %d: the persistent workspace lost its file: %q", i, res.Stdout)
		}
		kb, _ := strconv.Atoi(out[len(out)-5]) // df's 1K-blocks
		sizes = append(sizes, kb)
	}
	if sizes[0] < 80<<10 || sizes[0] > 96<<10 || sizes[1] != sizes[0] || sizes[2] < 160<<10 || sizes[2] > 192<<10 {
		t.Errorf("/workspace's sizes across starts at 96MiB, 96MiB, 192MiB: %v KiB", sizes)
	}
	if err := r.RemoveWorkspace("pat", id); err != nil {
		t.Fatal(err)
	}
	// The user's shared disk outlives their sandboxes, until it is removed itself.
	if _, err := os.Stat(filepath.Join(cfg.WorkspaceRoot, "pat", "disks", "shared.img")); err != nil {
		t.Errorf("the user's shared disk went with the sandbox: %v", err)
	}
	if err := r.RemoveShared("pat"); err != nil {
		t.Fatal(err)
	}
	noDiskImages(t, cfg)
}

// noDiskImages fails if a disk image or its mount is left under the workspace root.
func noDiskImages(t *testing.T, cfg runner.Config) {
	t.Helper()
	imgs, _ := filepath.Glob(filepath.Join(cfg.WorkspaceRoot, "*", "disks", "*.img"))
	for _, img := range imgs {
		t.Errorf("disk image left behind: %s", img)
	}
	mounts, _ := os.ReadFile("/proc/self/mounts")
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], cfg.WorkspaceRoot+"/") {
			t.Errorf("disk mount left behind: %s", f[1])
		}
	}
}
