package session

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMain lets the test binary be its own trampoline, as paddock-agent is in a sandbox.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == LimitedExecFlag {
		code, err := ExecLimited(os.Args[2:])
		fmt.Fprintf(os.Stderr, "paddock-agent: %v\n", err)
		os.Exit(code)
	}
	os.Exit(m.Run())
}

func limitedManager(t *testing.T, n int64) *Manager {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(t)
	if err := m.LimitFileSize(n, self); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestFileSizeLimit: under LimitFileSize(1MiB) a command that writes 4MiB is ended by
// SIGXFSZ with 1MiB written, its limit is 1MiB soft and hard from its first instruction
// (the shell reads it before running anything), and the agent's own limit is untouched.
// The same write with no limit succeeds: it is the limit that stopped it.
func TestFileSizeLimit(t *testing.T) {
	var before unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &before); err != nil {
		t.Fatal(err)
	}
	dd := []string{"dd", "if=/dev/zero", "of=big", "bs=1M", "count=4"}
	t.Run("limited", func(t *testing.T) {
		m := limitedManager(t, 1<<20)
		st := wait(t, start(t, m, dd...))
		if st.Signal != int(syscall.SIGXFSZ) {
			t.Errorf("dd of 4MiB under a 1MiB limit: %+v, want killed by SIGXFSZ (%d)", st, syscall.SIGXFSZ)
		}
		if fi, err := os.Stat(filepath.Join(m.workspace, "big")); err != nil || fi.Size() > 1<<20 {
			t.Errorf("the file: %v, %v; want at most 1MiB", fi.Size(), err)
		}
		// ulimit -f counts 512-byte blocks in dash and bash alike.
		out, _, _ := collect(t, start(t, m, "sh", "-c", "ulimit -S -f; ulimit -H -f; echo $PWD"))
		if want := "2048\n2048\n" + m.workspace + "\n"; out != want {
			t.Errorf("soft, hard limit and cwd in the command: %q, want %q", out, want)
		}
		var after unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_FSIZE, &after); err != nil || after != before {
			t.Errorf("the agent's own RLIMIT_FSIZE went from %+v to %+v (%v)", before, after, err)
		}
	})
	t.Run("trampoline failures", func(t *testing.T) {
		m := limitedManager(t, 1<<20)
		if st := wait(t, start(t, m, "no-such-command")); st.Code != 127 || st.Err == "" {
			t.Errorf("a missing command: %+v, want 127 with the reason, before any trampoline", st)
		}
		// The trampoline runs in a child: it sets the limit before it tries the exec.
		self, _ := os.Executable()
		m.fileSize = 0 // (one Manager at a time: each reaps every child of the process)
		for _, tt := range []struct {
			args []string
			code int
			says string
		}{
			{[]string{"1048576", "/nonexistent/cmd", "cmd"}, 127, "/nonexistent/cmd: no such file or directory"},
			{[]string{"-5", "/bin/true", "true"}, 126, `file size "-5" is not a byte count`},
			{[]string{"1048576"}, 126, "want FSIZE [--cgroup K] [--root DIR] [--as UID GID] [--nproc N] [--exec-only N FILE…] PATH ARGV0"},
			{[]string{"0", "--nproc", "0", "/bin/true", "true"}, 126, `--nproc "0": want a positive count of processes`},
			{[]string{"0", "--cgroup", "0", "/bin/true", "true"}, 126, `--cgroup "0": want a count of descriptors`},
			{[]string{"0", "--as", "0", "0", "/bin/true", "true"}, 126, `--as "0" "0": want a uid and a gid, not root's`},
			{[]string{"0", "--exec-only", "9", "/bin/true", "true"}, 126, `--exec-only "9": want a count of the files that follow`},
		} {
			s := start(t, m, append([]string{self, LimitedExecFlag}, tt.args...)...)
			_, stderr, _ := collect(t, s)
			if st := wait(t, s); st.Code != tt.code || !strings.Contains(stderr, tt.says) {
				t.Errorf("trampoline %q: %+v, stderr %q; want exit %d saying %q", tt.args, st, stderr, tt.code, tt.says)
			}
		}
		if err := m.LimitFileSize(0, "/bin/x"); err == nil {
			t.Error("LimitFileSize(0) was accepted")
		}
		if err := m.LimitFileSize(1, "agent"); err == nil {
			t.Error("LimitFileSize with a relative binary was accepted")
		}
	})
	t.Run("unlimited (control)", func(t *testing.T) {
		m := newManager(t)
		if st := wait(t, start(t, m, dd...)); st != (ExitStatus{}) {
			t.Errorf("CONTROL FAILED: dd of 4MiB without a limit: %+v, want success", st)
		}
	})
}

// TestProcessLimit: under LimitProcesses(7) a command's RLIMIT_NPROC is 7 soft and hard
// from its first instruction, and the agent's own limit is untouched; without it the
// command has the agent's.
func TestProcessLimit(t *testing.T) {
	var before unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NPROC, &before); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	limits := []string{"sh", "-c", "grep '^Max processes' /proc/self/limits"}
	t.Run("limited", func(t *testing.T) {
		m := newManager(t)
		m.SetSelf(self)
		if err := m.LimitProcesses(7); err != nil {
			t.Fatal(err)
		}
		out, _, _ := collect(t, start(t, m, limits...))
		if f := strings.Fields(out); len(f) < 4 || f[2] != "7" || f[3] != "7" {
			t.Errorf("the command's process limit: %q, want 7 soft and hard", out)
		}
		var after unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NPROC, &after); err != nil || after != before {
			t.Errorf("the agent's own RLIMIT_NPROC went from %+v to %+v (%v)", before, after, err)
		}
		if err := m.LimitProcesses(0); err == nil {
			t.Error("LimitProcesses(0) was accepted")
		}
	})
	t.Run("unlimited (control)", func(t *testing.T) {
		m := newManager(t)
		out, _, _ := collect(t, start(t, m, limits...))
		if f := strings.Fields(out); len(f) < 3 || f[2] == "7" {
			t.Errorf("CONTROL FAILED: the command's process limit without LimitProcesses: %q", out)
		}
	})
}

// TestFileSizeLimitKeepsTrampoline: a trampoline named by SetSelf (paddock-exec in a
// sandbox) still starts commands once a file size limit is set with the agent's binary,
// and the limit holds. The trampoline here is a script that leaves a mark, then execs the
// test binary's.
func TestFileSizeLimitKeepsTrampoline(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mark, tramp := filepath.Join(dir, "used"), filepath.Join(dir, "paddock-exec")
	script := "#!/bin/sh\ntouch " + mark + "\nexec " + self + " \"$@\"\n"
	if err := os.WriteFile(tramp, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	m := newManager(t)
	m.SetSelf(tramp)
	if err := m.LimitFileSize(1<<20, self); err != nil {
		t.Fatal(err)
	}
	out, _, _ := collect(t, start(t, m, "sh", "-c", "ulimit -H -f"))
	if out != "2048\n" {
		t.Errorf("hard file size limit in the command: %q, want 2048 blocks", out)
	}
	if _, err := os.Stat(mark); err != nil {
		t.Errorf("the command did not start through the trampoline set by SetSelf: %v", err)
	}
}

// A pump's buffer doubles after each read that fills it, up to readSize, and stays as it
// is after a read that did not.
func TestNextReadSize(t *testing.T) {
	for _, tc := range []struct{ size, n, want int }{
		{firstReadSize, 100, firstReadSize},
		{firstReadSize, firstReadSize - 1, firstReadSize},
		{firstReadSize, firstReadSize, 2 * firstReadSize},
		{readSize / 2, readSize / 2, readSize},
		{readSize, readSize, readSize},
	} {
		if got := nextReadSize(tc.size, tc.n); got != tc.want {
			t.Errorf("nextReadSize(%d, %d) = %d, want %d", tc.size, tc.n, got, tc.want)
		}
	}
}
