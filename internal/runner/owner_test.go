package runner_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/container"
	"github.com/paddockhq/paddock/internal/testenv"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// hostUserCan runs argv on the host as uid:gid 1000 (an account on many hosts, the
// sandbox user's default id) and says whether it succeeded.
func hostUserCan(t *testing.T, argv ...string) bool {
	t.Helper()
	cmd := exec.Command("setpriv", append([]string{"--reuid", "1000", "--regid", "1000", "--clear-groups", "--"}, argv...)...)
	out, err := cmd.CombinedOutput()
	t.Logf("as uid 1000: %v: %v %s", argv, err, out)
	return err == nil
}

// TestWorkspaceOwner: under runc with a user namespace, what a sandbox's commands write in
// its workspace (a disk image or a plain directory) is owned on the host by an id of the
// sandbox's own range, which no host account has, not by the sandbox user's id; a host
// user with the sandbox user's id can neither read the workspace nor plant a file in it or
// in its /tmp. A persistent sandbox started again keeps working on its files.
func TestWorkspaceOwner(t *testing.T) {
	testenv.RequireRoot(t)
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("setpriv (util-linux) is not installed")
	}
	for _, disk := range []wire.Size{128 << 20, 0} {
		t.Run("disk="+disk.String(), func(t *testing.T) {
			cfg := testenv.Config(t)
			if !cfg.UserNS() {
				t.Skip("user namespaces are off in this configuration")
			}
			// The host user must be able to reach the workspace root to show it is the
			// sandbox's own directories that keep it out.
			if err := os.MkdirAll(cfg.WorkspaceRoot, 0o711); err != nil {
				t.Fatal(err)
			}
			for d := cfg.WorkspaceRoot; d != "/"; d = filepath.Dir(d) {
				fi, _ := os.Stat(d)
				os.Chmod(d, fi.Mode().Perm()|0o011)
			}
			cfg.Limits.Disk = disk
			r := runner.New(cfg, testenv.Logger(t))
			id := runner.NewID()
			spec := runner.Spec{ID: id, Persistent: true, User: "olga", Tier: wire.TierContainer, Main: []string{"sleep", "600"}}
			for i := range 2 {
				sb, err := r.Create(tctx(t), spec)
				if err != nil {
					t.Fatal(err)
				}
				script := "mkdir -p d && echo $$ >> d/f && echo x > /tmp/t && cat d/f | wc -l"
				res, err := sb.Agent().Process().Execute(tctx(t), &pb.ExecuteRequest{Argv: []string{"sh", "-c", script}})
				if err != nil || res.GetStatus().GetExitCode() != 0 || strings.TrimSpace(string(res.Stdout)) != string(rune('1'+i)) {
					t.Fatalf("start %d: %v %+v", i, err, res)
				}
				hostUID, hostGID := sb.HostUser()
				for _, p := range []string{sb.Workspace, filepath.Join(sb.Workspace, "d"), filepath.Join(sb.Workspace, "d", "f")} {
					var st syscall.Stat_t
					if err := syscall.Lstat(p, &st); err != nil {
						t.Fatal(err)
					}
					if !container.IsRangeID(st.Uid) || !container.IsRangeID(st.Gid) || st.Uid != hostUID || st.Gid != hostGID {
						t.Errorf("start %d: %s is owned by %d:%d on the host, want the sandbox's range's %d:%d", i, p, st.Uid, st.Gid, hostUID, hostGID)
					}
				}
				if hostUserCan(t, "ls", sb.Workspace) || hostUserCan(t, "cat", filepath.Join(sb.Workspace, "d", "f")) || hostUserCan(t, "touch", filepath.Join(sb.Workspace, "planted")) {
					t.Errorf("start %d: host uid 1000 reached the workspace", i)
				}
				if disk > 0 && hostUserCan(t, "touch", filepath.Join(filepath.Dir(sb.Workspace), "tmp", "planted")) {
					t.Errorf("start %d: host uid 1000 planted a file in the sandbox's /tmp", i)
				}
				if err := sb.Destroy(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if !hostUserCan(t, "stat", filepath.Join(cfg.WorkspaceRoot, "olga", "sandboxes")) {
				t.Error("CONTROL FAILED: host uid 1000 cannot reach the user's sandboxes directory")
			}
			if err := r.RemoveWorkspace("olga", id); err != nil {
				t.Fatal(err)
			}
		})
	}
}
