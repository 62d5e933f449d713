package cli_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/testenv"
)

var keptLine = regexp.MustCompile(`paddock: kept sandbox (sb-[a-z2-7]{10}) \(paddock kept rm (sb-[a-z2-7]{10}) ends and removes it\)`)

// A sandbox paddock run --keep kept is listed by paddock kept ls, with its workspace, and
// paddock kept rm ends it and deletes all paddock made for it (its processes, runtime
// state, disk and temporary workspace) whichever runtime ran it, but never a directory
// the run was given with --workspace.
func TestKeptSandboxes(t *testing.T) {
	testenv.RequireRoot(t)
	conf, cfg := runConfig(t)
	const user = "keeper"
	run := func(args ...string) string {
		t.Helper()
		args = append([]string{"run", "--config", conf, "--user", user, "--keep"}, args...)
		_, stderr, code := paddockAs(t, "", args...)
		m := keptLine.FindStringSubmatch(stderr)
		if code != 0 || m == nil || m[1] != m[2] {
			t.Fatalf("paddock %s: exit %d, stderr %q; want the kept sandbox named", strings.Join(args, " "), code, stderr)
		}
		return m[1]
	}
	kept := func(args ...string) (string, string, int) {
		t.Helper()
		return paddockAs(t, "", append([]string{"kept", args[0], "--config", conf, "--user", user}, args[1:]...)...)
	}
	own := filepath.Join(filepath.Dir(cfg.DataDir), "own") // a directory the sandbox user reaches
	if err := os.Mkdir(own, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(own, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	runc := run("--", "sh", "-c", "echo kept > /workspace/f")
	runsc := run("--runtime", "runsc", "--", "true")
	given := run("--workspace", own, "--", "sh", "-c", "echo mine > /workspace/g")

	out, stderr, code := kept("ls")
	if code != 0 {
		t.Fatalf("kept ls: exit %d, %s", code, stderr)
	}
	workspace := ""
	for _, id := range []string{runc, runsc, given} {
		var line string
		for l := range strings.Lines(out) {
			if strings.HasPrefix(l, id+" ") {
				line = l
			}
		}
		if f := strings.Fields(line); len(f) != 3 || f[1] != "running" {
			t.Fatalf("kept ls: %s listed as %q, want it running with its workspace:\n%s", id, line, out)
		} else if id == runc {
			workspace = f[2]
		}
	}
	if data, err := os.ReadFile(filepath.Join(workspace, "f")); err != nil || string(data) != "kept\n" {
		t.Fatalf("the kept workspace %s: %q, %v", workspace, data, err)
	}
	pid := initPid(t, cfg, runc)

	if out, stderr, code := kept("rm", runc); code != 0 || out != "removed "+runc+"\n" {
		t.Fatalf("kept rm %s: exit %d, %q %q", runc, code, out, stderr)
	}
	if stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && !strings.Contains(string(stat), ") Z ") {
		t.Errorf("the removed sandbox's first process still runs: %s", stat)
	}
	gone(t, cfg, user, runc)
	if _, err := os.Stat(workspace); err == nil {
		t.Errorf("its workspace %s is still there", workspace)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rm", runc}, "sandbox " + runc + ": paddock run left no sandbox of that ID for user keeper on this host"},
		{[]string{"rm", "sb-BAD"}, `sandbox ID "sb-BAD": want sb- and 10 characters of a-z2-7`},
		{[]string{"rm"}, "kept rm: give sandbox IDs or --all"},
		{[]string{"rm", "--all", runsc}, "kept rm: give sandbox IDs or --all"},
		{[]string{"ls", "--user", "../x"}, `user: "../x" is not a user name`},
	} {
		if _, stderr, code := kept(tc.args...); code != 125 || !strings.Contains(stderr, "paddock: "+tc.want) {
			t.Errorf("kept %v: exit %d, stderr %q; want 125 and %q", tc.args, code, stderr, tc.want)
		}
	}

	if out, stderr, code := kept("rm", "--all"); code != 0 || !strings.Contains(out, "removed "+runsc+"\n") || !strings.Contains(out, "removed "+given+"\n") {
		t.Fatalf("kept rm --all: exit %d, %q %q", code, out, stderr)
	}
	gone(t, cfg, user, runsc)
	gone(t, cfg, user, given)
	if left, _ := filepath.Glob(filepath.Join(cfg.StateDir, "runsc", runsc+"*")); len(left) > 0 {
		t.Errorf("runsc's record of %s is still there: %v", runsc, left)
	}
	if data, err := os.ReadFile(filepath.Join(own, "g")); err != nil || string(data) != "mine\n" {
		t.Errorf("the directory given with --workspace lost its file: %q, %v", data, err)
	}
	if out, _, _ := kept("ls"); out != "ID  STATE  WORKSPACE\n" {
		t.Errorf("kept ls after rm --all:\n%s", out)
	}

	// A run under way is not left: neither listed nor removed, not even by --all. Once
	// its paddock run is killed, its sandbox is left, and listed and removed.
	cmd := exec.Command(testenv.Binary(t, "paddock"), "run", "--config", conf, "--user", user, "--", "sleep", "600")
	var runErr bytes.Buffer
	cmd.Stderr = &runErr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	busy := ownedRun(t, cfg, cmd.Process.Pid, exited, &runErr)
	if out, _, _ := kept("ls"); strings.Contains(out, busy) {
		t.Errorf("kept ls lists %s, whose run is under way:\n%s", busy, out)
	}
	want := "sandbox " + busy + ": paddock run (pid " + strconv.Itoa(cmd.Process.Pid) + ") is still running it"
	if _, stderr, code := kept("rm", busy); code != 125 || !strings.Contains(stderr, want) {
		t.Errorf("kept rm of a run under way: exit %d, %q; want 125 and %q", code, stderr, want)
	}
	if out, stderr, code := kept("rm", "--all"); code != 0 || out != "" {
		t.Errorf("kept rm --all with a run under way: exit %d, %q %q; want nothing removed", code, out, stderr)
	}
	if _, err := os.Stat(filepath.Join(cfg.StateDir, "sandboxes", busy)); err != nil {
		t.Fatalf("the run under way lost its sandbox: %v", err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	if out, _, _ := kept("ls"); !strings.Contains(out, busy+"  running") {
		t.Errorf("kept ls does not list %s, left running by a killed run:\n%s", busy, out)
	}
	if out, stderr, code := kept("rm", "--all"); code != 0 || out != "removed "+busy+"\n" {
		t.Fatalf("kept rm --all after the run was killed: exit %d, %q %q", code, out, stderr)
	}
	gone(t, cfg, user, busy)
}

// ownedRun waits until paddock run pid has recorded itself as its sandbox's run, and
// returns the sandbox's ID; exited is closed when that run has ended.
func ownedRun(t *testing.T, cfg runner.Config, pid int, exited <-chan struct{}, stderr *bytes.Buffer) string {
	t.Helper()
	for {
		owners, _ := filepath.Glob(filepath.Join(cfg.StateDir, "sandboxes", "*", "run.owner"))
		for _, o := range owners {
			if data, err := os.ReadFile(o); err == nil && strings.HasPrefix(string(data), strconv.Itoa(pid)+" ") {
				return filepath.Base(filepath.Dir(o))
			}
		}
		select {
		case <-exited:
			t.Fatalf("paddock run ended before it recorded its sandbox: %s", stderr)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
func initPid(t *testing.T, cfg runner.Config, id string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(cfg.StateDir, "sandboxes", id, "init.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// gone checks that nothing paddock made for sandbox id is left: its state, its disk
// image, any mount of it, its temporary workspace.
func gone(t *testing.T, cfg runner.Config, user, id string) {
	t.Helper()
	for _, p := range []string{
		filepath.Join(cfg.StateDir, "sandboxes", id),
		filepath.Join(cfg.WorkspaceRoot, user, "disks", id+".img"),
		filepath.Join(cfg.WorkspaceRoot, user, "tmp", id),
	} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s is still there after kept rm", p)
		}
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mounts), id) {
		t.Errorf("a mount of %s is left:\n%s", id, mounts)
	}
}
