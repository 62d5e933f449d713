//go:build microvm

package runner_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/container"
	"github.com/paddockhq/paddock/internal/testenv"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// TestQEMUUser: QEMU runs as an id of the microVM's own host id range, not as the sandbox
// user's id (uid 1000, an account on many hosts), while the guest's user stays 1000; what
// the guest writes in its workspace is owned by QEMU's id on the host, and a setuid bit
// the guest sets stays in the guest's view (9p's mapped-xattr), never on the host's file.
// One guest boot.
func TestQEMUUser(t *testing.T) {
	testenv.RequireRoot(t)
	r := runner.New(testenv.Config(t), testenv.Logger(t))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := r.Create(ctx, runner.Spec{User: "quinn", Tier: wire.TierMicroVM, Main: []string{"sleep", "600"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	res, err := sb.Agent().Process().Execute(ctx, &pb.ExecuteRequest{Argv: []string{"sh", "-c", "echo x > /workspace/f && cp /usr/bin/id /workspace/id && chmod u+s /workspace/id && stat -c %A /workspace/id && id -u"}})
	if err != nil || res.GetStatus().GetExitCode() != 0 {
		t.Fatalf("write in the guest: %v %+v", err, res)
	}
	if out := string(res.Stdout); out != "-rwsr-xr-x\n1000\n" {
		t.Errorf("in the guest: %q, want the setuid file as the guest sees it and uid 1000", out)
	}
	if fi, err := os.Lstat(filepath.Join(sb.Workspace, "id")); err != nil || fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
		t.Errorf("the guest's setuid file on the host: %v, %v; want no set-id bit", fi.Mode(), err)
	}
	hostUID, _ := sb.HostUser()
	if !container.IsRangeID(hostUID) {
		t.Fatalf("the microVM's host user is %d, want an id of a sandbox range", hostUID)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(sb.Workspace, "f"), &st); err != nil || st.Uid != hostUID {
		t.Errorf("the guest's file is owned by %d on the host (%v), want QEMU's %d", st.Uid, err, hostUID)
	}
	procs, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", sb.Cgroup(), "cgroup.procs"))
	if err != nil {
		procs, err = os.ReadFile(filepath.Join("/sys/fs/cgroup", sb.Cgroup(), "cgroup.procs"))
	}
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, pid := range strings.Fields(string(procs)) {
		status, err := os.ReadFile("/proc/" + pid + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				n++
				if f[1] != strconv.FormatUint(uint64(hostUID), 10) {
					t.Errorf("QEMU process %s runs as uid %s, want %d", pid, f[1], hostUID)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("CONTROL FAILED: no QEMU process found in the sandbox's cgroup")
	}
}
