package cgroups

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// unifiedRoot is a cgroup2 mount to test the v2 split on: the host's own on a v2 host,
// the hybrid layout's controller-less one on a v1 host (the split and the kill need no
// controller).
func unifiedRoot(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("cgroupfs is writable by root only")
	}
	for _, root := range []string{mountpoint, filepath.Join(mountpoint, "unified")} {
		var st unix.Statfs_t
		if unix.Statfs(root, &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			return root
		}
	}
	t.Skip("no cgroup2 mount: the kernel has no cgroup v2")
	return ""
}

// The v2 split: the sandbox's group, handed to its agent, becomes the agent's leaf and the
// commands' group beside it; a command's group below that one is killed whole, a process
// that left its session with setsid included, and the agent is untouched.
func TestSplitV2KillsACommandsGroup(t *testing.T) {
	root := unifiedRoot(t)
	path := fmt.Sprintf("/paddock-test/split-%d", os.Getpid())
	dirs, err := delegateV2(root, path, Limits{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := load(V2, root, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = sb.Kill(ctx)
		_ = sb.Delete()
		_ = os.Remove(filepath.Join(root, "paddock-test"))
	})
	agent := exec.Command("sleep", "60")
	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
	if err := sb.Add(agent.Process.Pid); err != nil {
		t.Fatal(err)
	}
	cmds, err := SplitV2(dirs[Unified], agent.Process.Pid, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dirs[Unified], "agent", "cgroup.procs")); string(b) != fmt.Sprintf("%d\n", agent.Process.Pid) {
		t.Fatalf("the agent's leaf holds %q, want the agent", b)
	}
	sub, files, err := cmds.Command("s1.1")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "echo 0 >&3 && exec 3>&- && (setsid sleep 60 &) && sleep 60")
	cmd.ExtraFiles = files
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		f.Close()
	}
	go cmd.Wait()
	var pids []int
	for deadline := time.Now().Add(10 * time.Second); len(pids) < 3; time.Sleep(10 * time.Millisecond) {
		if pids, err = sub.Pids(); err != nil || time.Now().After(deadline) {
			t.Fatalf("the command's group holds %v (%v), want the shell and two sleeps", pids, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sub.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sub.Delete(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d of the command outlived its group's kill", pid)
		}
	}
	if unix.Kill(agent.Process.Pid, 0) != nil {
		t.Error("the agent was killed with the command")
	}
}

// alive says whether pid runs (a zombie, killed and not yet reaped, does not).
func alive(pid int) bool {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(st), ") ")
	return !strings.HasPrefix(rest, "Z") && !strings.HasPrefix(rest, "X")
}
