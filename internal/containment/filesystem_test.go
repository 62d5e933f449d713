package containment

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/paddockhq/paddock/internal/wire"
)

// hostCanary writes a file only the host has, with a random content, and removes it when
// the test ends.
func hostCanary(t *testing.T, path string) (content string) {
	t.Helper()
	content = "canary-" + randHex(12)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(path) })
	return content
}

// TestFilesystem: the host's files, paddock's own state and other sandboxes' workspaces
// are out of reach; the root is read-only; kernel interfaces are masked; mounts, device
// nodes and setuid binaries give nothing.
func TestFilesystem(t *testing.T) {
	h := newHarness(t)

	// Another sandbox, alive meanwhile, with a file of its own that it can read.
	other := h.newBox(t, boxOpts{defaultWorkspace: true})
	otherName := "other-sandbox-" + randHex(6)
	otherContent := hostCanary(t, filepath.Join(other.ws, otherName))
	if got := other.mustExec(t, "cat /workspace/"+otherName); got != otherContent {
		t.Fatalf("CONTROL FAILED: the other sandbox cannot read its own file: %q", got)
	}
	otherSock := filepath.Join(h.cfg.StateDir, "sandboxes", other.sb.ID, "agent.sock")

	// Host-only files: in /root, in /home, in paddock's data and state directories.
	rootCanary := filepath.Join("/root", ".paddock-canary-"+randHex(6))
	hostCanary(t, rootCanary)
	homeDir := filepath.Join("/home", "paddock-canary-"+randHex(6))
	t.Cleanup(func() { os.RemoveAll(homeDir) })
	homeCanary := filepath.Join(homeDir, "secret")
	hostCanary(t, homeCanary)
	dataCanary := filepath.Join(h.cfg.DataDir, "canary-"+randHex(6))
	hostCanary(t, dataCanary)
	stateCanary := filepath.Join(h.cfg.StateDir, "canary-"+randHex(6))
	hostCanary(t, stateCanary)

	b := h.newBox(t, boxOpts{})
	visible := "visible-" + randHex(6)
	hostCanary(t, filepath.Join(b.ws, visible))
	// The sandbox's own file, so that it may hard link it (protected_hardlinks).
	if err := os.Chown(filepath.Join(b.ws, visible), int(b.uid), int(b.uid)); err != nil {
		t.Fatal(err)
	}
	suidID := setuidCopy(t, b.ws, "/usr/bin/id")

	hostTmp := t.TempDir()
	hostOnly := []string{filepath.Base(rootCanary), filepath.Base(homeDir), filepath.Base(dataCanary), filepath.Base(stateCanary), otherName}
	// Where gVisor's kernel answers differently from the host's, by leaving things out:
	// its /proc/sys has no core_pattern, and its sysfs no class/net, but its own devices.
	corePattern, sysfsControl := denied("EROFS", "EACCES"), probe{Name: "list /sys/class/net (control: sysfs is there)", Op: "readdir", Args: []string{"/sys/class/net"}}
	sysfsShows := "lo"
	if underRunsc() {
		corePattern = denied("ENOENT")
		sysfsControl, sysfsShows = probe{Name: "list /sys/devices/system/cpu (control: sysfs is there)", Op: "readdir", Args: []string{"/sys/devices/system/cpu"}}, "cpu0"
	}

	checks := []check{
		// The host's secrets.
		{p: probe{Name: "read /etc/shadow", Op: "read", Args: []string{"/etc/shadow"}}, want: denied("ENOENT", "EACCES"), host: same(probe{Op: "read", Args: []string{"/etc/shadow"}})},
		{p: probe{Name: "read /etc/hostname (control)", Op: "read", Args: []string{"/etc/hostname"}}, want: outContains("sandbox")},
		{p: probe{Name: "read the host's /root canary", Op: "read", Args: []string{rootCanary}}, want: denied("ENOENT", "EACCES"), host: same(probe{Op: "read", Args: []string{rootCanary}})},
		{p: probe{Name: "list /root", Op: "readdir", Args: []string{"/root"}}, want: notShown(filepath.Base(rootCanary)), host: same(probe{Op: "readdir", Args: []string{"/root"}}), hostWant: outContains(filepath.Base(rootCanary))},
		{p: probe{Name: "read the host's /home canary", Op: "read", Args: []string{homeCanary}}, want: denied("ENOENT", "EACCES"), host: same(probe{Op: "read", Args: []string{homeCanary}})},
		{p: probe{Name: "list /home", Op: "readdir", Args: []string{"/home"}}, want: notShown(filepath.Base(homeDir)), host: same(probe{Op: "readdir", Args: []string{"/home"}}), hostWant: outContains(filepath.Base(homeDir))},

		// /proc/<pid>/root: a way back to a root the sandbox should not have.
		{p: probe{Name: "read the /root canary through /proc/self/root", Op: "read", Args: []string{"/proc/self/root" + rootCanary}}, want: denied("ENOENT", "EACCES"), host: same(probe{Op: "read", Args: []string{"/proc/self/root" + rootCanary}})},
		{p: probe{Name: "/proc/self/root is the sandbox's own root (control)", Op: "readdir", Args: []string{"/proc/self/root"}}, want: outContains("workspace", ".paddock")},
		{p: probe{Name: "read through the agent's /proc/1/root", Op: "read", Args: []string{"/proc/1/root/etc/hostname"}}, want: denied("EACCES")},
		{p: probe{Name: "readlink /proc/1/root", Op: "readlink", Args: []string{"/proc/1/root"}}, want: denied("EACCES")},
		{p: probe{Name: "readlink /proc/1/cwd", Op: "readlink", Args: []string{"/proc/1/cwd"}}, want: denied("EACCES")},

		// The root is read-only; /tmp and /workspace are the places to write.
		{p: probe{Name: "create /paddock-probe", Op: "create", Args: []string{"/paddock-probe"}}, want: denied("EROFS", "EACCES")},
		{p: probe{Name: "create /usr/paddock-probe", Op: "create", Args: []string{"/usr/paddock-probe"}}, want: denied("EROFS", "EACCES")},
		{p: probe{Name: "create /etc/paddock-probe", Op: "create", Args: []string{"/etc/paddock-probe"}}, want: denied("EROFS", "EACCES")},
		{p: probe{Name: "create /.paddock/paddock-probe", Op: "create", Args: []string{"/.paddock/paddock-probe"}}, want: denied("EROFS", "EACCES")},
		{p: probe{Name: "open /etc/passwd for writing", Op: "open-write", Args: []string{"/etc/passwd"}}, want: denied("EROFS", "EACCES")},
		{p: probe{Name: "open the agent binary for writing", Op: "open-write", Args: []string{"/.paddock/paddock-agent"}}, want: denied("EROFS", "EACCES", "ETXTBSY")},
		{p: probe{Name: "open /proc/sys/kernel/core_pattern for writing", Op: "open-write", Args: []string{"/proc/sys/kernel/core_pattern"}}, want: corePattern},
		{p: probe{Name: "create /tmp/paddock-probe (control)", Op: "create", Args: []string{"/tmp/paddock-probe"}}, want: allowed},
		{p: probe{Name: "create /workspace/paddock-probe (control)", Op: "create", Args: []string{"/workspace/paddock-probe"}}, want: allowed},

		// paddock's own directories and the other sandbox.
		{p: probe{Name: "stat the data dir", Op: "stat", Args: []string{h.cfg.DataDir}}, want: denied("ENOENT", "EACCES"), host: same(probe{Op: "stat", Args: []string{h.cfg.DataDir}})},
		{p: probe{Name: "stat the state dir", Op: "stat", Args: []string{h.cfg.StateDir}}, want: denied("ENOENT", "EACCES"), host: same(probe{Op: "stat", Args: []string{h.cfg.StateDir}})},
		{p: probe{Name: "read the data dir canary", Op: "read", Args: []string{dataCanary}}, want: denied("ENOENT", "EACCES"), host: same(probe{Op: "read", Args: []string{dataCanary}})},
		{p: probe{Name: "read the state dir canary", Op: "read", Args: []string{stateCanary}}, want: denied("ENOENT", "EACCES"), host: same(probe{Op: "read", Args: []string{stateCanary}})},
		{p: probe{Name: "read the other sandbox's file by its host path", Op: "read", Args: []string{filepath.Join(other.ws, otherName)}}, want: denied("ENOENT", "EACCES"), host: same(probe{Op: "read", Args: []string{filepath.Join(other.ws, otherName)}})},
		{p: probe{Name: "dial the other sandbox's agent socket", Op: "dial", Args: []string{"unix", otherSock}}, want: denied("ENOENT", "EACCES", "ECONNREFUSED"), host: same(probe{Op: "stat", Args: []string{otherSock}})},
		{p: probe{Name: "list /workspace", Op: "readdir", Args: []string{"/workspace"}}, want: func(t *testing.T, r result) {
			outContains(visible)(t, r)
			notShown(otherName)(t, r)
		}},
		{p: probe{Name: "search the whole tree for host-only names", Op: "find-names", Args: []string{strings.Join(append(hostOnly, visible), ","), "/"}}, want: func(t *testing.T, r result) {
			outContains("/workspace/"+visible)(t, r) // the control: the walk does find files
			notShown(hostOnly...)(t, r)
		}},

		// Kernel interfaces that are masked.
		{p: probe{Name: "list /sys/firmware", Op: "readdir", Args: []string{"/sys/firmware"}}, want: empty, host: same(probe{Op: "readdir", Args: []string{"/sys/firmware"}}), hostWant: nonEmpty},
		{p: probe{Name: "list /sys/kernel", Op: "readdir", Args: []string{"/sys/kernel"}}, want: empty, host: same(probe{Op: "readdir", Args: []string{"/sys/kernel"}}), hostWant: nonEmpty},
		{p: probe{Name: "read /proc/timer_list", Op: "read", Args: []string{"/proc/timer_list"}}, want: empty, host: same(probe{Op: "read", Args: []string{"/proc/timer_list"}}), hostWant: nonEmpty},
		{p: sysfsControl, want: outContains(sysfsShows)},

		// Mounts: none may be made, of any kind.
		{p: probe{Name: "mount tmpfs", Op: "mount", Args: []string{"tmpfs", "none", "/tmp/m-tmpfs"}}, want: denied("EPERM"), host: same(probe{Op: "mount", Args: []string{"tmpfs", "none", filepath.Join(hostTmp, "m-tmpfs")}})},
		{p: probe{Name: "mount proc", Op: "mount", Args: []string{"proc", "proc", "/tmp/m-proc"}}, want: denied("EPERM"), host: same(probe{Op: "mount", Args: []string{"proc", "proc", filepath.Join(hostTmp, "m-proc")}})},
		{p: probe{Name: "bind mount /", Op: "mount", Args: []string{"", "/", "/tmp/m-bind", "bind"}}, want: denied("EPERM"), host: same(probe{Op: "mount", Args: []string{"", "/", filepath.Join(hostTmp, "m-bind"), "bind"}})},
		{p: probe{Name: "mount a cgroup v1 hierarchy (release_agent)", Op: "mount", Args: []string{"cgroup", "cgroup", "/tmp/m-cgroup"}}, want: denied("EPERM")},
		{p: probe{Name: "bind mount /workspace", Op: "mount", Args: []string{"", "/workspace", "/tmp/m-ws", "bind"}}, want: denied("EPERM")},
		{p: probe{Name: "mount(8) tmpfs", Op: "sh", Args: []string{"mkdir -p /tmp/m-sh && mount -t tmpfs none /tmp/m-sh"}}, want: denied()},

		// Special files.
		{p: probe{Name: "mknod /dev/null's twin in /tmp", Op: "mknod", Args: []string{"/tmp/null", "c", "1", "3"}}, want: denied("EPERM"), host: same(probe{Op: "mknod", Args: []string{filepath.Join(hostTmp, "null"), "c", "1", "3"}})},
		{p: probe{Name: "mknod a disk in /workspace", Op: "mknod", Args: []string{"/workspace/sda", "c", "8", "0"}}, want: denied("EPERM")},
		{p: probe{Name: "mkfifo /tmp/fifo (control)", Op: "mknod", Args: []string{"/tmp/fifo", "p"}}, want: allowed},
		{p: probe{Name: "hard link /etc/hostname into the workspace", Op: "link", Args: []string{"/etc/hostname", "/workspace/hostname-link"}}, want: denied("EXDEV", "EPERM")},
		{p: probe{Name: "hard link within the workspace (control)", Op: "link", Args: []string{"/workspace/" + visible, "/workspace/visible-link"}}, want: allowed},

		// Privileges: none held, none to be gained.
		{p: probe{Name: "/proc/self/status", Op: "read", Args: []string{"/proc/self/status"}}, want: unprivileged},
		{p: probe{Name: "a setuid binary is there (control)", Op: "stat", Args: []string{"/usr/bin/su"}}, want: setuidMode},
		{p: probe{Name: "su to root", Op: "sh", Args: []string{"su -c true root </dev/null"}}, want: denied()},
		{p: probe{Name: "run a setuid-root copy of id", Op: "sh", Args: []string{"/workspace/" + filepath.Base(suidID) + " -u"}}, want: func(t *testing.T, r result) {
			if r.Out = strings.TrimSpace(r.Out); !r.OK || r.Out != strconv.Itoa(int(b.uid)) {
				t.Errorf("ESCAPE: a setuid-root binary should run as uid %d: %s", b.uid, r)
			}
		}},
		{p: probe{Name: "setuid(0)", Op: "setuid"}, want: denied("EPERM")},
		{p: probe{Name: "chroot", Op: "chroot"}, want: denied("EPERM")},
	}
	// The walk above leaves the host's system directories out (skipTrees): each must be the
	// host's own, listing as it does on the host, and nothing else bound there.
	for _, d := range hostSystemDirs {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			checks = append(checks, check{p: probe{Name: "list " + d + " (the host's own)", Op: "readdir", Args: []string{d}}, want: sameNames(t, d)})
		}
	}
	t.Run("setuid control on the host", func(t *testing.T) {
		// The same setuid-root file, run by the sandbox's uid as a plain host process,
		// does elevate: the sandbox's result above is the sandbox's doing.
		cmd := exec.Command(suidID, "-u")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: b.uid, Gid: b.uid}}
		out, err := cmd.Output()
		if err != nil || strings.TrimSpace(string(out)) != "0" {
			t.Errorf("CONTROL FAILED: %s -u as uid %d on the host gave %q, %v; want 0", suidID, b.uid, out, err)
		}
	})
	if underRunsc() {
		// runsc hands the agent one connected socket, which has no path on the host (see
		// package container): there is no other agent's socket to dial.
		checks = slices.DeleteFunc(checks, func(c check) bool { return c.p.Name == "dial the other sandbox's agent socket" })
	}
	runChecks(t, b, checks)
	mountinfoNote(t, b, h)
}

// The workspace's history is the agent's alone: a persistent sandbox (the kind that has
// history) cannot read its store or rewrite its past.
func TestHistoryStore(t *testing.T) {
	h := newHarness(t)
	b := h.newBox(t, boxOpts{persistent: true})
	if b.sb.History == "" {
		t.Fatal("CONTROL FAILED: a persistent container sandbox has no history store")
	}
	runChecks(t, b, []check{
		{p: probe{Name: "stat the history store (control: it is there)", Op: "stat", Args: []string{wire.HistoryPath}}, want: allowed},
		{p: probe{Name: "list the history store", Op: "readdir", Args: []string{wire.HistoryPath}}, want: denied("EACCES")},
		{p: probe{Name: "read the history's index", Op: "read", Args: []string{wire.HistoryPath + "/index.json"}}, want: denied("EACCES")},
		{p: probe{Name: "forge a file in the history store", Op: "create", Args: []string{wire.HistoryPath + "/forged"}}, want: denied("EACCES")},
	})
}

// setuidCopy copies a binary into dir as a setuid-root file.
func setuidCopy(t *testing.T, dir, bin string) string {
	t.Helper()
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatalf("need %s for the setuid test: %v", bin, err)
	}
	dst := filepath.Join(dir, "suid-"+filepath.Base(bin))
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dst, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dst, os.ModeSetuid|0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// unprivileged reads /proc/self/status: no effective, permitted, inheritable or ambient
// capabilities, no_new_privs, and a seccomp filter. The bounding set is the agent's own
// (the container's root runs the agent with CHOWN, DAC_OVERRIDE, DAC_READ_SEARCH, FOWNER,
// KILL, SETGID, SETUID and SYS_CHROOT: 0x400ef) and nothing more; a command cannot gain it
// back, since it is not root and no_new_privs voids setuid bits and file capabilities.
func unprivileged(t *testing.T, r result) {
	t.Helper()
	if !r.OK {
		t.Fatalf("CONTROL FAILED: %s", r)
	}
	want := map[string]string{
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "00000000000400ef", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2",
	}
	got := map[string]string{}
	for _, line := range strings.Split(r.Out, "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			got[k] = strings.TrimSpace(v)
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("ESCAPE: /proc/self/status %s is %q, want %q", k, got[k], v)
		}
	}
}

func setuidMode(t *testing.T, r result) {
	t.Helper()
	mode, _, _ := strings.Cut(strings.TrimPrefix(r.Out, "mode="), " ")
	m, err := strconv.ParseUint(mode, 8, 32)
	if !r.OK || err != nil || m&syscall.S_ISUID == 0 {
		t.Errorf("CONTROL FAILED: want a setuid binary at /usr/bin/su to try: %s", r)
	}
}

// mountinfoNote logs which host paths the sandbox can learn from its mount table. The
// paths name, but do not open, the host's directories: every container shows its mount
// sources there. It is logged so a reader of the suite's output knows.
func mountinfoNote(t *testing.T, b *box, h *harness) {
	out := b.mustExec(t, "cat /proc/self/mountinfo")
	var named []string
	for _, p := range []string{h.cfg.StateDir, h.cfg.DataDir, b.ws} {
		if strings.Contains(out, p) {
			named = append(named, p)
		}
	}
	if len(named) > 0 {
		t.Logf("note: /proc/self/mountinfo names host paths (not reachable, as asserted above): %v", named)
	}
}

// sameNames: the probe listed the names that host directory dir holds.
func sameNames(t *testing.T, dir string) func(*testing.T, result) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, e := range entries {
		want = append(want, e.Name())
	}
	return func(t *testing.T, r result) {
		t.Helper()
		got := strings.Split(strings.TrimSpace(r.Out), "\n")
		slices.Sort(got)
		if !r.OK || !slices.Equal(got, want) {
			t.Errorf("%s in the sandbox does not list as the host's: %s (the host's: %v)", dir, r, want)
		}
	}
}
