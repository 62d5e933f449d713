//go:build linux

package harden

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/paddockhq/paddock/internal/errdefs"
)

// Apply confines its caller for good, so these tests never call it in the test process. Each
// run re-executes the test binary as TestHelperProcess, as the unprivileged uid the real agent
// runs as (when the test runs as root), lets it call Apply or not, attempt every check below and
// print what happened; the parent asserts. The unconfined "baseline" run is the positive
// control: what is denied under confinement must work without it, so a check cannot pass
// because it is broken.

const (
	helperEnv    = "PADDOCK_HARDEN_HELPER"
	resultPrefix = "HARDEN-RESULT "
	helperUID    = 65534 // nobody
	fileSizeCap  = 1 << 20
	noFileCap    = 256
)

// helperInput is what the parent tells a helper run.
type helperInput struct {
	Confine     bool
	Config      Config
	OutsideDir  string // world-writable, outside every granted path
	OutsideFile string // world-readable, outside every granted path
	DeniedAddr  string // a TCP listener whose port Config does not allow
	AllowedAddr string // a TCP listener on a port in Config.AllowConnectTCP
	Abstract    string // an abstract UNIX socket the parent listens on
	SiblingPID  int    // a process of the same uid, outside any Landlock domain
	ParentPID   int
}

// helperOutput is what a helper run prints.
type helperOutput struct {
	ABI      int
	Report   Report
	ApplyErr string
	Log      []map[string]any
	Checks   map[string]string // check name -> "ok", an errno name, "exit N" or an error
}

// helperState is what checks need that must be set up before Apply.
type helperState struct {
	tty       int             // a pty that is the helper's controlling terminal
	ttyErr    error           // why there is none
	oldThread chan func() any // runs functions on a thread that existed before Apply
}

type check struct {
	name string
	run  func(helperInput, *helperState) error
	// baseline is the result without Apply; "" when it depends on the host and is not
	// asserted, "skip" when the check must not run unconfined.
	baseline string
	// confined is the result after Apply.
	confined string
	// minABI is the Landlock ABI the confined result needs.
	minABI int
}

var checks = []check{
	// Filesystem.
	{name: "write workspace", baseline: "ok", confined: "ok", run: func(in helperInput, _ *helperState) error {
		return writeFile(filepath.Join(in.Config.Workspace, "w"), 1)
	}},
	{name: "write tempdir", baseline: "ok", confined: "ok", run: func(in helperInput, _ *helperState) error {
		return writeFile(filepath.Join(in.Config.TempDir, "w"), 1)
	}},
	{name: "rename between workspace dirs", baseline: "ok", confined: "ok", minABI: abiRefer, run: func(in helperInput, _ *helperState) error {
		a, b := filepath.Join(in.Config.Workspace, "a"), filepath.Join(in.Config.Workspace, "b")
		for _, d := range []string{a, b} {
			if err := os.Mkdir(d, 0o755); err != nil {
				return err
			}
		}
		if err := writeFile(filepath.Join(a, "f"), 1); err != nil {
			return err
		}
		return os.Rename(filepath.Join(a, "f"), filepath.Join(b, "f"))
	}},
	{name: "write outside", baseline: "ok", confined: "EACCES", minABI: 1, run: func(in helperInput, _ *helperState) error {
		return writeFile(filepath.Join(in.OutsideDir, "w"), 1)
	}},
	{name: "read outside", baseline: "ok", confined: "EACCES", minABI: 1, run: func(in helperInput, _ *helperState) error {
		_, err := os.ReadFile(in.OutsideFile)
		return err
	}},
	{name: "list root", baseline: "ok", confined: "EACCES", minABI: 1, run: func(helperInput, *helperState) error {
		_, err := os.ReadDir("/")
		return err
	}},
	{name: "read /root", baseline: "", confined: "EACCES", run: func(helperInput, *helperState) error {
		_, err := os.ReadDir("/root")
		return err
	}},
	{name: "read /etc/passwd", baseline: "ok", confined: "ok", run: func(helperInput, *helperState) error {
		_, err := os.ReadFile("/etc/passwd")
		return err
	}},
	{name: "write /dev/null", baseline: "ok", confined: "ok", run: func(helperInput, *helperState) error {
		return writeFile("/dev/null", 1)
	}},
	{name: "exec /bin/true", baseline: "ok", confined: "ok", run: func(helperInput, *helperState) error {
		return exec.Command("/bin/true").Run()
	}},
	{name: "child writes and reads workspace", baseline: "ok", confined: "ok", run: func(in helperInput, _ *helperState) error {
		return exec.Command("/bin/sh", "-c", "echo hi >child && cat child >/dev/null").Run()
	}},
	{name: "child reads outside", baseline: "ok", confined: "exit 1", minABI: 1, run: func(in helperInput, _ *helperState) error {
		return exec.Command("/bin/sh", "-c", `cat "$0" >/dev/null`, in.OutsideFile).Run()
	}},
	{name: "child reads /root", baseline: "", confined: "exit 1", run: func(helperInput, *helperState) error {
		return exec.Command("/bin/sh", "-c", "cat /root/.bashrc >/dev/null").Run()
	}},
	{name: "thread from before Apply writes outside", baseline: "ok", confined: "EACCES", minABI: 1, run: func(in helperInput, s *helperState) error {
		return s.onOldThread(func() error { return writeFile(filepath.Join(in.OutsideDir, "t"), 1) })
	}},
	{name: "thread from before Apply opens netlink", baseline: "ok", confined: "EAFNOSUPPORT", run: func(in helperInput, s *helperState) error {
		return s.onOldThread(func() error { return socket(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE) })
	}},

	// Processes.
	{name: "ptrace traceme", baseline: "skip", confined: "EPERM", run: func(helperInput, *helperState) error {
		_, _, e := unix.RawSyscall(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0)
		return errnoErr(e)
	}},
	{name: "ptrace attach sibling", baseline: "ok", confined: "EPERM", run: func(in helperInput, _ *helperState) error {
		return ptraceAttachDetach(in.SiblingPID)
	}},
	{name: "unshare user namespace", baseline: "EINVAL", confined: "EPERM", run: func(helperInput, *helperState) error {
		// A multithreaded process cannot unshare its user namespace: EINVAL shows the kernel
		// got the call, EPERM that the filter answered first.
		return unix.Unshare(unix.CLONE_NEWUSER)
	}},
	{name: "clone into a user namespace", baseline: "ok", confined: "EPERM", run: func(helperInput, *helperState) error {
		cmd := exec.Command("/bin/true")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
		return cmd.Run()
	}},
	{name: "kill sibling", baseline: "ok", confined: "EPERM", minABI: abiScope, run: func(in helperInput, _ *helperState) error {
		return unix.Kill(in.SiblingPID, 0)
	}},
	{name: "kill parent", baseline: "", confined: "EPERM", run: func(in helperInput, _ *helperState) error {
		return unix.Kill(in.ParentPID, 0)
	}},
	{name: "kill own child", baseline: "ok", confined: "ok", run: func(helperInput, *helperState) error {
		cmd := exec.Command("/bin/sleep", "30")
		if err := cmd.Start(); err != nil {
			return err
		}
		defer cmd.Wait()
		return cmd.Process.Signal(unix.SIGUSR1)
	}},

	// Sockets and network.
	{name: "socket unix", baseline: "ok", confined: "ok", run: func(helperInput, *helperState) error {
		return socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	}},
	{name: "socket inet", baseline: "ok", confined: "ok", run: func(helperInput, *helperState) error {
		return socket(unix.AF_INET, unix.SOCK_STREAM, 0)
	}},
	{name: "socket inet6 udp", baseline: "ok", confined: "ok", run: func(helperInput, *helperState) error {
		return socket(unix.AF_INET6, unix.SOCK_DGRAM, 0)
	}},
	{name: "socket netlink", baseline: "ok", confined: "EAFNOSUPPORT", run: func(helperInput, *helperState) error {
		return socket(unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE)
	}},
	{name: "socket packet", baseline: "", confined: "EAFNOSUPPORT", run: func(helperInput, *helperState) error {
		return socket(unix.AF_PACKET, unix.SOCK_RAW, 0)
	}},
	{name: "socket vsock", baseline: "", confined: "EAFNOSUPPORT", run: func(helperInput, *helperState) error {
		return socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0)
	}},
	{name: "socket mptcp", baseline: "", confined: "EAFNOSUPPORT", run: func(helperInput, *helperState) error {
		return socket(unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP)
	}},
	{name: "tcp connect to a denied port", baseline: "ok", confined: "EACCES", minABI: abiNet, run: func(in helperInput, _ *helperState) error {
		return dial("tcp4", in.DeniedAddr)
	}},
	{name: "tcp connect to an allowed port", baseline: "ok", confined: "ok", run: func(in helperInput, _ *helperState) error {
		return dial("tcp4", in.AllowedAddr)
	}},
	{name: "tcp fast open to a denied port", baseline: "ok", confined: "ENOTSUP" /* EOPNOTSUPP */, run: func(in helperInput, _ *helperState) error {
		return fastOpen(in.DeniedAddr)
	}},
	{name: "tcp fast open connect to a denied port", baseline: "ok", confined: "EACCES", minABI: abiNet, run: func(in helperInput, _ *helperState) error {
		return fastOpenConnect(in.DeniedAddr)
	}},
	{name: "tcp listen", baseline: "ok", confined: "EACCES", minABI: abiNet, run: func(helperInput, *helperState) error {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			l.Close()
		}
		return err
	}},
	{name: "abstract socket outside", baseline: "ok", confined: "EPERM", minABI: abiScope, run: func(in helperInput, _ *helperState) error {
		return dial("unix", "@"+in.Abstract)
	}},
	{name: "abstract socket inside", baseline: "ok", confined: "ok", run: func(helperInput, *helperState) error {
		name := fmt.Sprintf("@paddock-harden-inside-%d", os.Getpid())
		l, err := net.Listen("unix", name)
		if err != nil {
			return err
		}
		defer l.Close()
		return dial("unix", name)
	}},
	{name: "io_uring_setup", baseline: "", confined: "ENOSYS", run: func(helperInput, *helperState) error {
		var params [120]byte // struct io_uring_params
		fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params)), 0)
		if e == 0 {
			unix.Close(int(fd))
		}
		return errnoErr(e)
	}},

	// Terminal.
	{name: "ioctl TIOCGWINSZ on the pty", baseline: "ok", confined: "ok", run: func(_ helperInput, s *helperState) error {
		if s.ttyErr != nil {
			return s.ttyErr
		}
		_, err := unix.IoctlGetWinsize(s.tty, unix.TIOCGWINSZ)
		return err
	}},
	{name: "ioctl TIOCSTI", baseline: "", confined: "EPERM", run: func(_ helperInput, s *helperState) error {
		return s.ioctlByte(unix.TIOCSTI)
	}},
	{name: "ioctl TIOCSTI with bit 32 set", baseline: "", confined: "EPERM", run: func(_ helperInput, s *helperState) error {
		return s.ioctlByte(1<<32 | unix.TIOCSTI)
	}},
	{name: "ioctl TIOCLINUX", baseline: "", confined: "EPERM", run: func(_ helperInput, s *helperState) error {
		return s.ioctlByte(unix.TIOCLINUX)
	}},

	// Limits and process state.
	{name: "write past the file size limit", baseline: "ok", confined: "EFBIG", run: func(in helperInput, _ *helperState) error {
		return writeFile(filepath.Join(in.Config.Workspace, "big"), fileSizeCap+1)
	}},
	{name: "open past the fd limit", baseline: "ok", confined: "EMFILE", run: func(helperInput, *helperState) error {
		var fds []int
		defer func() {
			for _, fd := range fds {
				unix.Close(fd)
			}
		}()
		for range noFileCap + 10 {
			fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			fds = append(fds, fd)
		}
		return nil
	}},
	{name: "no core dumps", baseline: "", confined: "ok", run: func(helperInput, *helperState) error {
		var l unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_CORE, &l); err != nil {
			return err
		}
		if l.Cur != 0 || l.Max != 0 {
			return fmt.Errorf("RLIMIT_CORE is %d/%d", l.Cur, l.Max)
		}
		return nil
	}},
	{name: "no_new_privs", baseline: "", confined: "ok", run: func(helperInput, *helperState) error {
		if v, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); err != nil || v != 1 {
			return fmt.Errorf("PR_GET_NO_NEW_PRIVS = %d (%v)", v, err)
		}
		return nil
	}},
	{name: "seccomp filter mode", baseline: "", confined: "ok", run: func(helperInput, *helperState) error {
		if v, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); err != nil || v != unix.SECCOMP_MODE_FILTER {
			return fmt.Errorf("PR_GET_SECCOMP = %d (%v)", v, err)
		}
		return nil
	}},
}

func TestApply(t *testing.T) {
	env := newTestEnv(t)
	modes := []struct {
		name             string
		confine, require bool
	}{
		{"baseline", false, false},
		{"best effort", true, false},
		{"landlock required", true, true},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			out := env.run(t, m.confine, m.require)
			if m.require && out.ABI == 0 {
				if !strings.Contains(out.ApplyErr, errdefs.ErrUnavailable.Error()) {
					t.Errorf("Apply without Landlock: got error %q, want %q", out.ApplyErr, errdefs.ErrUnavailable)
				}
				t.Skip("kernel has no Landlock: Apply refused, as required")
			}
			if m.confine {
				if out.ApplyErr != "" {
					t.Errorf("Apply: %s", out.ApplyErr)
				}
				checkReport(t, out)
			}
			for _, c := range checks {
				t.Run(c.name, func(t *testing.T) {
					got, ran := out.Checks[c.name]
					want := c.baseline
					if m.confine {
						want = c.confined
					}
					switch {
					case want == "skip":
						if ran {
							t.Errorf("ran with result %q; must not run unconfined", got)
						}
						return
					case !ran:
						t.Fatal("the helper did not run this check")
					case want == "":
						t.Logf("result %q (depends on the host, not asserted)", got)
						return
					case m.confine && out.ABI < c.minABI:
						t.Skipf("kernel Landlock ABI %d < %d lacks what this needs (result %q)", out.ABI, c.minABI, got)
					}
					if got != want {
						t.Errorf("got %q, want %q", got, want)
					}
				})
			}
		})
	}
}

// checkReport asserts that every step is listed, in order, with the status this kernel
// supports, and that each was logged as it was reported.
func checkReport(t *testing.T, out helperOutput) {
	t.Helper()
	want := []StepResult{
		{Step: "rlimit_core", Status: StatusOK},
		{Step: "rlimit_nofile", Status: StatusOK},
		{Step: "rlimit_fsize", Status: StatusOK},
		{Step: "no_new_privs", Status: StatusOK},
		{Step: "landlock_fs", Status: StatusOK},
		{Step: "landlock_net", Status: statusAt(out.ABI, abiNet)},
		{Step: "landlock_scope", Status: statusAt(out.ABI, abiScope)},
		{Step: "seccomp", Status: StatusOK},
	}
	if out.ABI == 0 {
		t.Skip("kernel has no Landlock: the report differs")
	}
	if len(out.Report) != len(want) {
		t.Fatalf("report has %d steps, want %d:\n%+v", len(out.Report), len(want), out.Report)
	}
	for i, w := range want {
		if got := out.Report[i]; got.Step != w.Step || got.Status != w.Status || got.Detail == "" {
			t.Errorf("step %d: got %+v, want %s %s with a detail", i, got, w.Step, w.Status)
		}
	}
	if len(out.Log) != len(out.Report) {
		t.Fatalf("%d log events for %d steps", len(out.Log), len(out.Report))
	}
	for i, r := range out.Report {
		l := out.Log[i]
		if l["msg"] != "harden" || l["step"] != r.Step || l["status"] != string(r.Status) || l["detail"] != r.Detail {
			t.Errorf("log event %d = %v, want msg harden and %+v", i, l, r)
		}
	}
	t.Logf("report:\n%s", formatReport(out.Report))
}

func statusAt(abi, needed int) Status {
	if abi < needed {
		return StatusUnsupported
	}
	return StatusOK
}

func formatReport(r Report) string {
	var b strings.Builder
	for _, s := range r {
		fmt.Fprintf(&b, "  %-15s %-11s %s\n", s.Step, s.Status, s.Detail)
	}
	return b.String()
}

// testEnv is what the parent sets up once for every helper run.
type testEnv struct {
	root    string // world-traversable base of everything the helper touches
	binary  string // copy of the test binary the helper uid can execute
	cred    *syscall.Credential
	uid     int
	denied  net.Listener
	allowed net.Listener
	abs     string
	sibling int
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	root, err := os.MkdirTemp("", "paddock-harden-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	// MkdirTemp makes 0700 directories; the helper uid must traverse this one.
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	env := &testEnv{root: root, uid: os.Getuid()}
	if os.Geteuid() == 0 {
		env.uid = helperUID
		env.cred = &syscall.Credential{Uid: helperUID, Gid: helperUID}
	}
	env.binary = filepath.Join(root, "harden.test")
	if err := copyExecutable(os.Args[0], env.binary); err != nil {
		t.Fatal(err)
	}
	env.denied = listenTCP(t)
	env.allowed = listenTCP(t)
	env.abs = fmt.Sprintf("paddock-harden-test-%d", os.Getpid())
	abs, err := net.Listen("unix", "@"+env.abs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { abs.Close() })
	go acceptAndClose(abs)

	sibling := exec.Command("/bin/sleep", "300")
	sibling.SysProcAttr = &syscall.SysProcAttr{Credential: env.cred}
	if err := sibling.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sibling.Process.Kill(); sibling.Wait() })
	env.sibling = sibling.Process.Pid
	return env
}

// run starts one helper and returns what it printed.
func (e *testEnv) run(t *testing.T, confine, requireLandlock bool) helperOutput {
	t.Helper()
	dir := e.mkdir(t, filepath.Base(t.Name()), 0o755)
	outsideDir := e.mkdir(t, filepath.Join(filepath.Base(dir), "outside-rw"), 0o777)
	outsideRO := e.mkdir(t, filepath.Join(filepath.Base(dir), "outside-ro"), 0o755)
	outsideFile := filepath.Join(outsideRO, "secret")
	if err := os.WriteFile(outsideFile, []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	in := helperInput{
		Confine: confine,
		Config: Config{
			Workspace:       e.mkdir(t, filepath.Join(filepath.Base(dir), "workspace"), 0o700),
			TempDir:         e.mkdir(t, filepath.Join(filepath.Base(dir), "tmp"), 0o700),
			ReadOnly:        []string{"/usr", "/bin", "/sbin", "/lib", "/lib64", "/lib32", "/etc"},
			ReadWriteFiles:  []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"},
			AllowConnectTCP: []uint16{port(e.allowed)},
			Rlimits:         Rlimits{NoFile: noFileCap, FileSize: fileSizeCap},
			RequireLandlock: requireLandlock,
		},
		OutsideDir:  outsideDir,
		OutsideFile: outsideFile,
		DeniedAddr:  e.denied.Addr().String(),
		AllowedAddr: e.allowed.Addr().String(),
		Abstract:    e.abs,
		SiblingPID:  e.sibling,
		ParentPID:   os.Getpid(),
	}
	raw, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.binary, "-test.run=^TestHelperProcess$")
	cmd.Dir = in.Config.Workspace
	cmd.Env = []string{"PATH=/usr/bin:/bin", helperEnv + "=" + string(raw)}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: e.cred}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helper: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
	}
	for line := range strings.Lines(stdout.String()) {
		if rest, ok := strings.CutPrefix(line, resultPrefix); ok {
			var out helperOutput
			if err := json.Unmarshal([]byte(rest), &out); err != nil {
				t.Fatal(err)
			}
			return out
		}
	}
	t.Fatalf("helper printed no result\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	return helperOutput{}
}

// mkdir makes a directory under the env root owned by the helper uid.
func (e *testEnv) mkdir(t *testing.T, rel string, mode os.FileMode) string {
	t.Helper()
	dir := filepath.Join(e.root, rel)
	if err := os.Mkdir(dir, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	if err := os.Chown(dir, e.uid, e.uid); err != nil && os.Geteuid() == 0 {
		t.Fatal(err)
	}
	return dir
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func listenTCP(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go acceptAndClose(l)
	return l
}

func acceptAndClose(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

func port(l net.Listener) uint16 { return uint16(l.Addr().(*net.TCPAddr).Port) }

// TestHelperProcess is the confined side of TestApply; it does nothing in a normal test run.
func TestHelperProcess(t *testing.T) {
	raw := os.Getenv(helperEnv)
	if raw == "" {
		return
	}
	var in helperInput
	if err := json.Unmarshal([]byte(raw), &in); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	out, err := json.Marshal(runHelper(in))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println(resultPrefix + string(out))
	os.Exit(0)
}

func runHelper(in helperInput) helperOutput {
	s := &helperState{oldThread: make(chan func() any)}
	s.tty, s.ttyErr = controllingPty()
	go s.serveOldThread()

	out := helperOutput{ABI: landlockABI(), Checks: map[string]string{}}
	if in.Confine {
		var logs bytes.Buffer
		report, err := Apply(in.Config, slog.New(slog.NewJSONHandler(&logs, nil)))
		out.Report = report
		if err != nil {
			out.ApplyErr = err.Error()
		}
		sc := bufio.NewScanner(&logs)
		for sc.Scan() {
			var event map[string]any
			if err := json.Unmarshal(sc.Bytes(), &event); err == nil {
				out.Log = append(out.Log, event)
			}
		}
	}
	for _, c := range checks {
		if !in.Confine && c.baseline == "skip" {
			continue
		}
		out.Checks[c.name] = result(c.run(in, s))
	}
	return out
}

// serveOldThread pins a goroutine to an OS thread before Apply and runs functions on it, to
// show that Apply reached threads that already existed.
func (s *helperState) serveOldThread() {
	runtime.LockOSThread() // for good: the thread ends with the helper
	for f := range s.oldThread {
		f()
	}
}

func (s *helperState) onOldThread(f func() error) error {
	done := make(chan error)
	s.oldThread <- func() any { done <- f(); return nil }
	return <-done
}

// controllingPty opens a new pty and makes it the helper's controlling terminal, so that
// TIOCSTI would work on it without the filter.
func controllingPty() (int, error) {
	if _, err := unix.Setsid(); err != nil {
		return -1, fmt.Errorf("setsid: %w", err)
	}
	ptmx, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.IoctlSetPointerInt(ptmx, unix.TIOCSPTLCK, 0); err != nil {
		return -1, err
	}
	n, err := unix.IoctlGetUint32(ptmx, unix.TIOCGPTN)
	if err != nil {
		return -1, err
	}
	tty, err := unix.Open("/dev/pts/"+strconv.Itoa(int(n)), unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.IoctlSetInt(tty, unix.TIOCSCTTY, 0); err != nil {
		return -1, fmt.Errorf("TIOCSCTTY: %w", err)
	}
	return tty, nil // ptmx stays open with the helper, or the tty would hang up
}

func (s *helperState) ioctlByte(req uint64) error {
	if s.ttyErr != nil {
		return s.ttyErr
	}
	b := byte(' ')
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(s.tty), uintptr(req), uintptr(unsafe.Pointer(&b)))
	return errnoErr(e)
}

func ptraceAttachDetach(pid int) error {
	runtime.LockOSThread() // ptrace belongs to the tracing thread
	defer runtime.UnlockOSThread()
	if err := unix.PtraceAttach(pid); err != nil {
		return err
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
		return err
	}
	return unix.PtraceDetach(pid)
}

func socket(domain, typ, proto int) error {
	fd, err := unix.Socket(domain, typ|unix.SOCK_CLOEXEC, proto)
	if err == nil {
		unix.Close(fd)
	}
	return err
}

func dial(network, addr string) error {
	c, err := net.DialTimeout(network, addr, 10*time.Second)
	if err == nil {
		c.Close()
	}
	return err
}

// fastOpen sends data with the SYN (MSG_FASTOPEN), which connects without connect(2).
func fastOpen(addr string) error {
	fd, sa, err := tcpSocket(addr)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Sendto(fd, []byte("x"), unix.MSG_FASTOPEN, sa); err != nil {
		return err
	}
	// The parent accepts and closes: EOF, or a reset for the unread byte, means connected.
	if _, err := unix.Read(fd, make([]byte, 1)); err != nil && !errors.Is(err, unix.ECONNRESET) {
		return err
	}
	return nil
}

// fastOpenConnect is the other way into TCP Fast Open: connect(2) with TCP_FASTOPEN_CONNECT.
func fastOpenConnect(addr string) error {
	fd, sa, err := tcpSocket(addr)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_FASTOPEN_CONNECT, 1); err != nil {
		return err
	}
	return unix.Connect(fd, sa)
}

func tcpSocket(addr string) (int, *unix.SockaddrInet4, error) {
	ap, err := net.ResolveTCPAddr("tcp4", addr)
	if err != nil {
		return -1, nil, err
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, nil, err
	}
	sa := &unix.SockaddrInet4{Port: ap.Port}
	copy(sa.Addr[:], ap.IP.To4())
	return fd, sa, nil
}

func writeFile(path string, size int) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(make([]byte, size))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// result names an outcome the way the table spells it.
func result(err error) string {
	var errno unix.Errno
	var exit *exec.ExitError
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &exit):
		return "exit " + strconv.Itoa(exit.ExitCode())
	case errors.As(err, &errno):
		return unix.ErrnoName(errno)
	}
	return err.Error()
}
