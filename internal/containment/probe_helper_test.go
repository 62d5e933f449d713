package containment

// This file is the probe helper: the code the test binary runs when it is started with
// probeArg, inside a sandbox or (for the controls) on the host. It performs each probe it
// is given and prints one JSON result per line. It must not rely on anything of the test
// process: it runs in a different mount, pid and network namespace.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// probeArg, as the first argument, makes the test binary the probe helper.
const probeArg = "paddock-containment-probe"

// probe is one attempt the helper makes.
type probe struct {
	Name string   `json:"name"`
	Op   string   `json:"op"`
	Args []string `json:"args,omitempty"`
	// Guard refuses the probe unless the network is isolated (lo is the only interface):
	// it may send to a non-loopback address, which is acceptable only when the kernel has
	// no route to send it by.
	Guard bool `json:"guard,omitempty"`
}

// result is what a probe did. OK means the attempt achieved what it tried (read the file,
// made the mount, found the secret); Errno names the error number it failed with.
type result struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Errno  string `json:"errno,omitempty"`
	Err    string `json:"err,omitempty"`
	Out    string `json:"out,omitempty"`
	Millis int64  `json:"ms"`
}

func (r result) String() string {
	if r.OK {
		return fmt.Sprintf("%s: succeeded (%d ms) out=%q", r.Name, r.Millis, clip(r.Out))
	}
	return fmt.Sprintf("%s: failed (%d ms) errno=%s err=%q out=%q", r.Name, r.Millis, r.Errno, r.Err, clip(r.Out))
}

func clip(s string) string {
	if len(s) > 400 {
		return s[:400] + "…"
	}
	return s
}

// errNotFound is what the search probes return when they find nothing.
var errNotFound = errors.New("not found")

// helperMain runs the probes encoded in args[0] and prints their results.
func helperMain(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: probe '<json list of probes>'")
		return 2
	}
	var probes []probe
	if err := json.Unmarshal([]byte(args[0]), &probes); err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		return 2
	}
	enc := json.NewEncoder(os.Stdout)
	for _, p := range probes {
		_ = enc.Encode(runProbe(p))
	}
	return 0
}

func runProbe(p probe) (r result) {
	r.Name = p.Name
	start := time.Now()
	defer func() {
		r.Millis = time.Since(start).Milliseconds()
		if v := recover(); v != nil {
			r.OK, r.Err = false, fmt.Sprintf("helper panic: %v", v)
		}
	}()
	op, ok := ops[p.Op]
	if !ok {
		r.Err = "unknown op " + p.Op
		return r
	}
	if p.Guard {
		if ifs := interfaces(); len(ifs) != 1 || ifs[0] != "lo" {
			r.Errno, r.Err = "UNSAFE", fmt.Sprintf("not sent: the network is not isolated (interfaces %v)", ifs)
			return r
		}
	}
	out, err := op(p.Args)
	r.Out = out
	if err != nil {
		r.Err = err.Error()
		var errno syscall.Errno
		if errors.As(err, &errno) {
			r.Errno = unix.ErrnoName(errno)
		}
		return r
	}
	r.OK = true
	return r
}

// interfaces lists the network interfaces of the caller's namespace, from /proc/net/dev.
func interfaces() []string {
	data, err := os.ReadFile("/proc/net/dev")
	if err != nil {
		return []string{"unreadable: " + err.Error()}
	}
	var names []string
	for _, line := range strings.Split(string(data), "\n") {
		if name, _, ok := strings.Cut(line, ":"); ok && !strings.Contains(name, "|") {
			names = append(names, strings.TrimSpace(name))
		}
	}
	return names
}

var ops = map[string]func(args []string) (string, error){
	"read":         opRead,
	"readdir":      opReaddir,
	"stat":         opStat,
	"readlink":     func(a []string) (string, error) { return os.Readlink(a[0]) },
	"create":       opCreate,
	"open-write":   opOpenWrite,
	"link":         func(a []string) (string, error) { return "", os.Link(a[0], a[1]) },
	"mknod":        opMknod,
	"mount":        opMount,
	"unshare":      opUnshare,
	"clone":        opClone,
	"ptrace":       opPtrace,
	"ptrace-child": opPtraceChild,
	"vm-readv":     opVMReadv,
	"setuid": func([]string) (string, error) {
		return "", onThrowawayThread(func() error { return rawErr(unix.SYS_SETUID, 0, 0) })
	},
	"chroot":        opChroot,
	"socket":        opSocket,
	"io-uring":      opIOUring,
	"dial":          opDial,
	"listen":        opListen,
	"udp-send":      opUDPSend,
	"kill":          opKill,
	"prlimit":       opPrlimit,
	"renice":        opRenice,
	"sh":            opSh,
	"sh-listen":     opShListen,
	"scan-proc":     opScanProc,
	"grep-tree":     opGrepTree,
	"find-names":    opFindNames,
	"file-contains": opFileContains,
}

func opRead(a []string) (string, error) {
	f, err := os.Open(a[0])
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	return string(b), err
}

func opReaddir(a []string) (string, error) {
	f, err := os.Open(a[0])
	if err != nil {
		return "", err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	return strings.Join(names, "\n"), err
}

func opStat(a []string) (string, error) {
	fi, err := os.Lstat(a[0])
	if err != nil {
		return "", err
	}
	st := fi.Sys().(*syscall.Stat_t)
	return fmt.Sprintf("mode=%o uid=%d", st.Mode, st.Uid), nil
}

func opCreate(a []string) (string, error) {
	f, err := os.OpenFile(a[0], os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", err
	}
	_, err = f.WriteString("probe\n")
	return "", errors.Join(err, f.Close())
}

// opOpenWrite opens an existing file for writing and closes it without writing: enough
// to show the file is writable, without changing anything if it is.
func opOpenWrite(a []string) (string, error) {
	f, err := os.OpenFile(a[0], os.O_WRONLY, 0)
	if err != nil {
		return "", err
	}
	return "", f.Close()
}

// opMknod makes a node: "p" for a FIFO, "c MAJOR MINOR" for a character device.
func opMknod(a []string) (string, error) {
	mode := uint32(unix.S_IFIFO | 0o600)
	dev := 0
	if a[1] == "c" {
		major, _ := strconv.Atoi(a[2])
		minor, _ := strconv.Atoi(a[3])
		mode, dev = unix.S_IFCHR|0o600, int(unix.Mkdev(uint32(major), uint32(minor)))
	}
	return "", unix.Mknod(a[0], mode, dev)
}

// opMount mounts: args fstype, source, target, and "bind" for a bind mount. The target
// is made first so that a refusal is the mount's, not a missing directory's.
func opMount(a []string) (string, error) {
	if err := os.MkdirAll(a[2], 0o755); err != nil {
		return "", fmt.Errorf("make target: %w", err)
	}
	var flags uintptr
	if len(a) > 3 && a[3] == "bind" {
		flags = unix.MS_BIND | unix.MS_REC
	}
	err := unix.Mount(a[1], a[2], a[0], flags, "")
	if err == nil {
		_ = unix.Unmount(a[2], unix.MNT_DETACH)
	}
	return "", err
}

var nsFlags = map[string]uintptr{
	"user": unix.CLONE_NEWUSER, "mount": unix.CLONE_NEWNS, "net": unix.CLONE_NEWNET,
	"pid": unix.CLONE_NEWPID, "ipc": unix.CLONE_NEWIPC, "uts": unix.CLONE_NEWUTS, "cgroup": unix.CLONE_NEWCGROUP,
}

// opUnshare calls unshare(2) for one namespace on a thread that is thrown away after, so a
// success (on the host, for the controls) leaves the helper's other threads as they were.
func opUnshare(a []string) (string, error) {
	flag, ok := nsFlags[a[0]]
	if !ok {
		return "", fmt.Errorf("unknown namespace %q", a[0])
	}
	return "", onThrowawayThread(func() error { return rawErr(unix.SYS_UNSHARE, flag) })
}

// opClone starts /bin/true in new namespaces through clone(2), the other way in.
func opClone(a []string) (string, error) {
	var flags uintptr
	for _, n := range a {
		flags |= nsFlags[n]
	}
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags}
	return "", cmd.Run()
}

// opPtrace attaches to a process and, if that works, detaches again at once.
func opPtrace(a []string) (string, error) {
	pid, err := strconv.Atoi(a[0])
	if err != nil {
		return "", err
	}
	return "", onThrowawayThread(func() error {
		if err := unix.PtraceAttach(pid); err != nil {
			return err
		}
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, unix.WALL, nil)
		return unix.PtraceDetach(pid)
	})
}

// opPtraceChild attaches to a child of the helper's own: no ownership or dumpability rule
// stands in the way, so only a filter on the system call itself can refuse it.
func opPtraceChild([]string) (string, error) {
	cmd := exec.Command("/bin/sleep", "30")
	if err := cmd.Start(); err != nil {
		return "", err
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	return opPtrace([]string{strconv.Itoa(cmd.Process.Pid)})
}

// opVMReadv reads a few bytes of another process's memory at the start of its first
// mapping (from its maps when readable, else where a static Go binary is loaded), so that a
// refusal is not an unmapped address.
func opVMReadv(a []string) (string, error) {
	pid, err := strconv.Atoi(a[0])
	if err != nil {
		return "", err
	}
	addr := uintptr(0x400000)
	if data, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid)); err == nil {
		if start, _, ok := strings.Cut(string(data), "-"); ok {
			if v, err := strconv.ParseUint(start, 16, 64); err == nil {
				addr = uintptr(v)
			}
		}
	}
	buf := make([]byte, 16)
	local := []unix.Iovec{{Base: &buf[0], Len: uint64(len(buf))}}
	remote := []unix.RemoteIovec{{Base: addr, Len: len(buf)}}
	n, err := unix.ProcessVMReadv(pid, local, remote, 0)
	return hex.EncodeToString(buf[:max(n, 0)]), err
}

// opChroot asks for chroot("/"): the permission check is the same as for any other
// directory, and a success changes nothing for the probes after it.
func opChroot([]string) (string, error) { return "", unix.Chroot("/") }

// opSocket makes (and closes) a socket that would bypass the network namespace's rules or
// reach outside it: "packet", "raw-icmp" or "vsock". Nothing is sent.
func opSocket(a []string) (string, error) {
	var fd int
	var err error
	switch a[0] {
	case "packet":
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL)))
	case "raw-icmp":
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP)
	case "vsock":
		fd, err = unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0)
	default:
		return "", fmt.Errorf("unknown socket kind %q", a[0])
	}
	if err == nil {
		unix.Close(fd)
	}
	return "", err
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func opIOUring([]string) (string, error) {
	var params [120]byte // struct io_uring_params, zeroed
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params[0])), 0)
	if errno != 0 {
		return "", errno
	}
	unix.Close(int(fd))
	return "", nil
}

// opDial connects (network, address); an address starting with "@" is an abstract Unix
// socket. The connection is what counts: the hello written after is best effort, since the
// other side may have hung up already.
func opDial(a []string) (string, error) {
	c, err := net.DialTimeout(a[0], a[1], 3*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_, _ = c.Write([]byte("probe\n"))
	return c.RemoteAddr().String(), nil
}

// opListen binds and listens on a TCP address (then lets go of it), with SO_REUSEADDR as
// Go sets it, and SO_REUSEPORT too: the two ways to share a port someone else holds.
func opListen(a []string) (string, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) })
		return errors.Join(err, serr)
	}}
	l, err := lc.Listen(context.Background(), "tcp", a[0])
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func opUDPSend(a []string) (string, error) {
	c, err := net.Dial("udp", a[0])
	if err != nil {
		return "", err
	}
	defer c.Close()
	_, err = c.Write([]byte("probe"))
	return "", err
}

func opKill(a []string) (string, error) {
	pid, err1 := strconv.Atoi(a[0])
	sig, err2 := strconv.Atoi(a[1])
	if err := errors.Join(err1, err2); err != nil {
		return "", err
	}
	return "", unix.Kill(pid, syscall.Signal(sig))
}

// opPrlimit lowers another process's open-file limit to n.
func opPrlimit(a []string) (string, error) {
	pid, err1 := strconv.Atoi(a[0])
	n, err2 := strconv.ParseUint(a[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return "", err
	}
	lim := unix.Rlimit{Cur: n, Max: n}
	return "", unix.Prlimit(pid, unix.RLIMIT_NOFILE, &lim, nil)
}

// opRenice sets another process's nice value.
func opRenice(a []string) (string, error) {
	pid, err1 := strconv.Atoi(a[0])
	prio, err2 := strconv.Atoi(a[1])
	if err := errors.Join(err1, err2); err != nil {
		return "", err
	}
	return "", unix.Setpriority(unix.PRIO_PROCESS, pid, prio)
}

// opSh runs a shell script; it succeeds when the script exits 0. Out is its combined
// output.
func opSh(a []string) (string, error) {
	return runSh(a[0], nil)
}

func runSh(script string, env []string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// opShListen runs a script with a listener of the helper's own on 127.0.0.1:$PORT, which
// accepts and drops connections: the positive control for connecting over loopback.
func opShListen(a []string) (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return runSh(a[0], []string{"PORT=" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)})
}

// unmask decodes a needle that was masked so that it does not appear verbatim in the
// helper's own command line (which the scans read).
func unmask(s string) []byte {
	b, _ := hex.DecodeString(s)
	for i := range b {
		b[i] ^= 0x5a
	}
	return b
}

// mask is unmask's inverse, for the test side.
func mask(s string) string {
	b := []byte(s)
	for i := range b {
		b[i] ^= 0x5a
	}
	return hex.EncodeToString(b)
}

// opScanProc looks for a masked needle in every /proc/<pid>/environ and cmdline it can
// read; it succeeds when it finds it. Out lists where.
func opScanProc(a []string) (string, error) {
	needle := unmask(a[0])
	pids, _ := filepath.Glob("/proc/[0-9]*")
	var hits []string
	for _, p := range pids {
		for _, f := range []string{"environ", "cmdline"} {
			if data, err := os.ReadFile(filepath.Join(p, f)); err == nil && bytes.Contains(data, needle) {
				hits = append(hits, filepath.Join(p, f))
			}
		}
	}
	if len(hits) == 0 {
		return fmt.Sprintf("scanned %d processes", len(pids)), errNotFound
	}
	return strings.Join(hits, "\n"), nil
}

// skipTrees are kernel filesystems a tree walk leaves alone: they are not where files
// leak to, and some of their files block or never end. So are the host's system
// directories, bound read-only at the sandbox's root and in the gated root: they are the
// host's own by design (TestFilesystem checks that each lists as the host's does), none of
// the host-only files is in them, and walking their hundred thousand entries is most of a
// walk's time (tens of seconds under gVisor on a busy host).
var skipTrees = func() map[string]bool {
	m := map[string]bool{"/proc": true, "/sys": true, "/dev": true, "/.paddock/gated/dev": true}
	for _, d := range hostSystemDirs {
		m[d], m["/.paddock/gated"+d] = true, true
	}
	return m
}()

// hostSystemDirs are the host's directories a sandbox gets read-only (as package
// container binds them).
var hostSystemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// opGrepTree looks for a masked needle in the regular files under the given roots (not
// following symlinks); it succeeds when it finds it.
func opGrepTree(a []string) (string, error) {
	needle := unmask(a[0])
	var hits []string
	files := 0
	for _, root := range a[1:] {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return nil
			case d.IsDir() && skipTrees[p]:
				return filepath.SkipDir
			case !d.Type().IsRegular():
				return nil
			}
			files++
			if fileContains(p, needle) {
				hits = append(hits, p)
			}
			return nil
		})
	}
	summary := fmt.Sprintf("searched %d files", files)
	if len(hits) == 0 {
		return summary, errNotFound
	}
	return strings.Join(hits, "\n"), nil
}

func opFileContains(a []string) (string, error) {
	if fileContains(a[1], unmask(a[0])) {
		return "", nil
	}
	return "", errNotFound
}

// fileContains streams a file looking for needle, so large files cost no memory.
func fileContains(p string, needle []byte) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	buf := make([]byte, 0, 2<<20)
	chunk := make([]byte, 1<<20)
	for {
		n, err := r.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if bytes.Contains(buf, needle) {
			return true
		}
		if keep := len(needle) - 1; len(buf) > keep {
			buf = append(buf[:0], buf[len(buf)-keep:]...)
		}
		if err != nil {
			return false
		}
	}
}

// opFindNames walks the given root for files with any of the comma-separated names; it
// succeeds when it finds one. Out lists what it found.
func opFindNames(a []string) (string, error) {
	want := map[string]bool{}
	for _, n := range strings.Split(a[0], ",") {
		want[n] = true
	}
	var hits []string
	entries := 0
	_ = filepath.WalkDir(a[1], func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return nil
		case d.IsDir() && skipTrees[p]:
			return filepath.SkipDir
		}
		entries++
		if want[d.Name()] {
			hits = append(hits, p)
		}
		return nil
	})
	summary := fmt.Sprintf("walked %d entries", entries)
	if len(hits) == 0 {
		return summary, errNotFound
	}
	return strings.Join(hits, "\n"), nil
}

// onThrowawayThread runs f on an OS thread of its own that is never given back to the Go
// scheduler: f may change the thread's namespaces, root or credentials.
func onThrowawayThread(f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // no Unlock: the thread exits with the goroutine
		ch <- f()
	}()
	return <-ch
}

func rawErr(trap uintptr, args ...uintptr) error {
	var a [6]uintptr
	copy(a[:], args)
	_, _, errno := unix.Syscall6(trap, a[0], a[1], a[2], a[3], a[4], a[5])
	if errno != 0 {
		return errno
	}
	return nil
}
