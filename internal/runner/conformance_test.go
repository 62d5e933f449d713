package runner_test

// The backend conformance suite: every tier this machine supports must pass every test
// here, through the whole path (runner, backend, agent, RPC).

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/testenv"
	"github.com/paddockhq/paddock/internal/wire"
	pb "github.com/paddockhq/paddock/internal/wire/agentv1"
)

// tierCase is a tier (and the container tier's runtime) under test with what differs
// between them.
type tierCase struct {
	name     string
	tier     wire.Tier
	runtime  string // OCI runtime of the container tier
	insecure bool
	// inContainer is set when the workspace appears at /workspace.
	inContainer bool
}

// tiers are the tiers under test; conformance_microvm_test.go adds the microVM tier under
// the microvm build tag.
var tiers = []tierCase{
	{"container", wire.TierContainer, "runc", false, true},
	{"container-runsc", wire.TierContainer, "runsc", false, true},
	{"process", wire.TierProcess, "", true, false},
}

type harness struct {
	t        *testing.T
	cfg      runner.Config
	r        *runner.Runner
	tier     wire.Tier
	runtime  string
	insecure bool
	inCtr    bool
	// onCluster: the sandboxes run on a Kubernetes cluster (conformance_kube_test.go).
	onCluster bool
}

// clusterSetup points a tier case's configuration at a cluster, by the case's name; the
// kube build tag fills it (conformance_kube_test.go). clusterLeft lists what of the tier's
// sandboxes is left on the cluster.
var (
	clusterSetup = map[string]func(t *testing.T, cfg *runner.Config){}
	clusterLeft  = map[string]func(t *testing.T) []string{}
)

func forEachTier(t *testing.T, f func(t *testing.T, h *harness)) {
	testenv.RequireRoot(t)
	for _, tc := range tiers {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testenv.Config(t)
			setup := clusterSetup[tc.name]
			if setup != nil {
				setup(t, &cfg)
			}
			h := &harness{t: t, cfg: cfg, r: runner.New(cfg, testenv.Logger(t)), tier: tc.tier, runtime: tc.runtime, insecure: tc.insecure, inCtr: tc.inContainer,
				onCluster: setup != nil}
			f(t, h)
			h.assertNothingLeft()
			if left := clusterLeft[tc.name]; left != nil {
				for _, o := range left(t) {
					t.Errorf("left on the cluster: %s", o)
				}
			}
		})
	}
}

func (h *harness) spec(argv ...string) runner.Spec {
	return runner.Spec{User: "conf", Tier: h.tier, Runtime: h.runtime, Insecure: h.insecure, Main: argv, Limits: wire.Limits{Timeout: time.Minute}}
}

type outcome struct {
	res            runner.Result
	stdout, stderr string
}

func (h *harness) run(spec runner.Spec, stdin string) outcome {
	h.t.Helper()
	var out, errb bytes.Buffer
	stdio := runner.Stdio{Stdout: &out, Stderr: &errb}
	if stdin != "" {
		stdio.Stdin = strings.NewReader(stdin)
	}
	res, err := h.r.Run(context.Background(), spec, stdio, false)
	if err != nil {
		h.t.Fatalf("run %q: %v (stderr %q)", spec.Main, err, errb.String())
	}
	return outcome{res, out.String(), errb.String()}
}

// assertNothingLeft checks that every sandbox the test made is gone: no state directory,
// no cgroup, no temporary workspace, no OCI runtime state, no mount under the state
// directory.
func (h *harness) assertNothingLeft() {
	t := h.t
	t.Helper()
	entries, _ := os.ReadDir(filepath.Join(h.cfg.StateDir, "sandboxes"))
	for _, e := range entries {
		t.Errorf("sandbox state left behind: %s", e.Name())
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory/paddock", e.Name())); err == nil {
			t.Errorf("cgroup left behind: %s", e.Name())
		}
	}
	tmp, _ := os.ReadDir(filepath.Join(h.cfg.WorkspaceRoot, "conf", "tmp"))
	for _, e := range tmp {
		t.Errorf("temporary workspace left behind: %s", e.Name())
	}
	for _, rt := range []string{"runc", "runsc"} {
		left, _ := os.ReadDir(filepath.Join(h.cfg.StateDir, rt))
		for _, e := range left {
			t.Errorf("%s state left behind: %s", rt, e.Name())
		}
	}
	mounts, _ := os.ReadFile("/proc/self/mounts")
	for _, line := range strings.Split(string(mounts), "\n") {
		if f := strings.Fields(line); len(f) > 1 && strings.HasPrefix(f[1], h.cfg.StateDir+"/") {
			t.Errorf("mount left behind: %s", f[1])
		}
	}
	noDiskImages(t, h.cfg)
}

func TestOutputAndExitStatus(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		tests := []struct {
			name           string
			argv           []string
			stdout, stderr string
			code           int
		}{
			{"echo", []string{"echo", "hello"}, "hello\n", "", 0},
			{"streams apart", []string{"sh", "-c", "echo out; echo err >&2; echo out2"}, "out\nout2\n", "err\n", 0},
			{"exit code", []string{"sh", "-c", "exit 3"}, "", "", 3},
			{"killed by signal", []string{"sh", "-c", "kill -TERM $$"}, "", "", 128 + 15},
			{"not found", []string{"no-such-command-xyz"}, "", "", 127},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				o := h.run(h.spec(tt.argv...), "")
				if o.stdout != tt.stdout || o.stderr != tt.stderr || o.res.ExitCode() != tt.code {
					t.Fatalf("got stdout %q stderr %q exit %d; want %q %q %d", o.stdout, o.stderr, o.res.ExitCode(), tt.stdout, tt.stderr, tt.code)
				}
			})
		}
	})
}

// TestThreads: a program linked with glibc starts a thread. glibc's pthread_create tries
// clone3 first and falls back to clone only when clone3 fails with ENOSYS; the container
// tier's seccomp profile refuses clone3 with exactly that (its flags are out of a filter's
// reach), and a runtime that answered EPERM instead (runsc did: gvisor.dev/issue/14688,
// patched by scripts/setup.sh) would leave every threaded program without threads. The
// thread also calls clone3 itself and reports what it got.
func TestThreads(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed on this host: it is the glibc program this test runs")
	}
	const script = `
import ctypes, os, threading
libc = ctypes.CDLL(None, use_errno=True)
out = []
def work():
    r = libc.syscall(435, None, 0)
    out.append("thread ran; clone3: " + ("ok" if r >= 0 else os.strerror(ctypes.get_errno())))
t = threading.Thread(target=work)
t.start()
t.join()
print(out[0])
`
	forEachTier(t, func(t *testing.T, h *harness) {
		o := h.run(h.spec("python3", "-c", script), "")
		// The process tier's own filter (package harden) refuses clone3 the same way; a
		// microVM guest has no seccomp filter (its kernel is the boundary), so its kernel
		// answers the empty clone3 itself.
		want := "thread ran; clone3: Function not implemented\n"
		if h.tier == wire.TierMicroVM {
			want = "thread ran; clone3: Invalid argument\n" // the kernel itself: no clone_args at all
		}
		if o.stdout != want || o.res.ExitCode() != 0 {
			t.Fatalf("got %q (stderr %q, exit %d), want %q", o.stdout, o.stderr, o.res.ExitCode(), want)
		}
	})
}

func TestStdin(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		in := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
		o := h.run(h.spec("sha256sum"), in)
		want := fmt.Sprintf("%x  -\n", sha256.Sum256([]byte(in)))
		if o.stdout != want || o.res.ExitCode() != 0 {
			t.Fatalf("sha256sum of stdin = %q (exit %d), want %q", o.stdout, o.res.ExitCode(), want)
		}
	})
}

func TestLargeOutputIntact(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		o := h.run(h.spec("seq", "1", "3000000"), "")
		var want strings.Builder
		for i := 1; i <= 3000000; i++ {
			want.WriteString(strconv.Itoa(i))
			want.WriteByte('\n')
		}
		if o.stdout != want.String() {
			t.Fatalf("seq output: %d bytes, want %d; intact prefix %d", len(o.stdout), want.Len(), commonPrefix(o.stdout, want.String()))
		}
	})
}

func commonPrefix(a, b string) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func TestWorkspaceAndEnv(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		if h.onCluster {
			t.Skip("a host directory cannot be a cluster sandbox's workspace: it lives on the sandbox's volume, on whichever node runs it")
		}
		ws, err := os.MkdirTemp("", "pdk-ws")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(ws)
		if err := os.Chown(ws, 1000, 1000); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ws, "in.txt"), []byte("from host"), 0o644); err != nil {
			t.Fatal(err)
		}
		spec := h.spec("sh", "-c", `pwd; cat in.txt; echo; echo "$GREETING"; echo made > out.txt`)
		spec.Workspace, spec.Env = ws, []string{"GREETING=hi there"}
		o := h.run(spec, "")
		wantDir := ws
		if h.inCtr {
			wantDir = "/workspace"
		}
		if want := wantDir + "\nfrom host\nhi there\n"; o.stdout != want {
			t.Fatalf("stdout %q, want %q (stderr %q)", o.stdout, want, o.stderr)
		}
		if got, err := os.ReadFile(filepath.Join(ws, "out.txt")); err != nil || string(got) != "made\n" {
			t.Fatalf("file written in the sandbox: %q, %v", got, err)
		}
	})
}

func TestLimits(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		t.Run("timeout", func(t *testing.T) {
			spec := h.spec("sleep", "30")
			spec.Limits.Timeout = time.Second
			// The bound includes the start: a microVM's boot under TCG on a loaded host
			// takes up to tens of seconds, and the timeout counts from the command's start.
			bound := 10 * time.Second
			if h.tier == wire.TierMicroVM {
				bound = time.Minute
			}
			start := time.Now()
			o := h.run(spec, "")
			if !o.res.TimedOut || o.res.ExitCode() != 124 || time.Since(start) > bound {
				t.Fatalf("timed out %v exit %d after %v", o.res.TimedOut, o.res.ExitCode(), time.Since(start))
			}
		})
		t.Run("memory", func(t *testing.T) {
			// A microVM's limit is its guest's RAM, which must hold a kernel too.
			limit, bombMiB := wire.Size(64<<20), 200
			if h.tier == wire.TierMicroVM {
				limit, bombMiB = 160<<20, 600
			}
			// Perl (essential in Debian, so in every tier's /usr) writes each MiB at memset
			// speed: the bomb reaches the limit in a few seconds even under emulation. A
			// shell's command substitution reads 128 bytes per system call and may not.
			spec := h.spec("perl", "-e", fmt.Sprintf(`push @a, "a" x (1<<20) for 1..%d; print "survived\n"`, bombMiB))
			spec.Limits.Memory = limit
			// The OOM kill ends the bomb, not a timer: the timeout only bounds a hang, so a
			// slow guest on a busy host cannot turn the kill into exit 124.
			spec.Limits.Timeout = 10 * time.Minute
			o := h.run(spec, "")
			if !o.res.OOM || o.res.ExitCode() != 137 || strings.Contains(o.stdout, "survived") {
				t.Fatalf("memory bomb: OOM %v exit %d stdout %q", o.res.OOM, o.res.ExitCode(), o.stdout)
			}
		})
		t.Run("pids", func(t *testing.T) {
			spec := h.spec("sh", "-c", `for i in $(seq 100); do sleep 10 & done; echo all-started`)
			spec.Limits.Pids = 32
			o := h.run(spec, "")
			if strings.Contains(o.stdout, "all-started") || !strings.Contains(o.stderr, "fork") {
				t.Fatalf("100 forks under --pids 32: stdout %q stderr %q, want a fork failure", o.stdout, o.stderr)
			}
		})
		t.Run("cpu", func(t *testing.T) {
			if h.tier == wire.TierMicroVM {
				// The guest's own accounting charges a throttled vCPU's lost time to
				// whatever ran on it: the host's count of QEMU's CPU time says it.
				qemuCPUUnderQuota(t, h)
				return
			}
			// Two busy loops for a second of wall time under a quarter CPU: the cgroup
			// must hold them to about a quarter second of CPU time.
			spec := h.spec("sh", "-c", `(while :; do :; done) & (while :; do :; done) & sleep 1; kill $(jobs -p); cat /proc/self/stat >/dev/null; times`)
			spec.Limits.CPUs = 0.25
			o := h.run(spec, "")
			used := childCPU(t, o.stdout)
			if used > 0.6 {
				t.Fatalf("busy loops used %.2fs of CPU in 1s under --cpus 0.25", used)
			}
		})
	})
}

// qemuCPUUnderQuota runs two busy loops for two seconds in a microVM under a quarter CPU
// and checks what QEMU's processes used meanwhile: about a quarter of the host's time.
// forkCount forks children that sleep until a fork is refused, then prints how many
// processes it had then, itself included, and why the last fork failed.
const forkCount = `
import os, signal, time
kids = []
while True:
    try:
        pid = os.fork()
    except OSError as e:
        why = e.strerror
        break
    if pid == 0:
        time.sleep(600)
        os._exit(0)
    kids.append(pid)
print(len(kids) + 1, why)
for k in kids:
    os.kill(k, signal.SIGKILL)
    os.waitpid(k, 0)
`

// TestPidsCountsTheCommand holds --pids N to what docs/tiers.md and `paddock run --help` say it
// gives a command: N processes, the command itself included, in every tier but the
// process tier, where the agent's unused thread reserve adds up to 8. The smallest limit
// leaves the agent's threads no room but their reserve.
func TestPidsCountsTheCommand(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 is not installed on this host: it is the program that forks here")
	}
	forEachTier(t, func(t *testing.T, h *harness) {
		for _, n := range []int{4, 64} {
			t.Run(strconv.Itoa(n), func(t *testing.T) {
				spec := h.spec("python3", "-c", forkCount)
				spec.Limits.Pids = int64(n)
				o := h.run(spec, "")
				var got int
				if _, err := fmt.Sscanf(o.stdout, "%d", &got); err != nil || o.res.ExitCode() != 0 {
					t.Fatalf("fork count: stdout %q stderr %q exit %d", o.stdout, o.stderr, o.res.ExitCode())
				}
				hi := n
				if h.tier == wire.TierProcess {
					hi = n + 8
				}
				if got < n || got > hi {
					t.Fatalf("--pids %d gave the command %d processes (%s), want %d to %d", n, got, strings.TrimSpace(o.stdout), n, hi)
				}
			})
		}
	})
}

func qemuCPUUnderQuota(t *testing.T, h *harness) {
	spec := h.spec("sleep", "60")
	spec.Limits.CPUs = 0.25
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := h.r.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	before, began := cgroupCPU(t, sb.Cgroup()), time.Now()
	res, err := sb.Agent().Process().Execute(ctx, &pb.ExecuteRequest{
		Argv: []string{"sh", "-c", `(while :; do :; done) & a=$!; (while :; do :; done) & b=$!; sleep 2; kill $a $b`}})
	if err != nil || res.GetStatus().GetExitCode() != 0 {
		t.Fatalf("busy loops: %v %+v", err, res)
	}
	// The guest's two seconds take longer on the host's clock when its vCPU is throttled:
	// the share of the host's time is what the quota holds.
	used, wall := cgroupCPU(t, sb.Cgroup())-before, time.Since(began)
	if share := used.Seconds() / wall.Seconds(); share > 0.4 {
		t.Fatalf("QEMU used %s of CPU in %s (%.2f CPUs) of busy loops under --cpus 0.25", used, wall.Round(time.Millisecond), share)
	}
	t.Logf("QEMU used %s of CPU in %s of busy loops under --cpus 0.25", used, wall.Round(time.Millisecond))
}

// cgroupCPU is the CPU time the processes of the host's cgroup (QEMU) have used, from
// their /proc/PID/stat: these hosts have no cpuacct controller in the sandbox's cgroup.
func cgroupCPU(t *testing.T, group string) time.Duration {
	t.Helper()
	procs, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", group, "cgroup.procs"))
	if err != nil {
		procs, err = os.ReadFile(filepath.Join("/sys/fs/cgroup", group, "cgroup.procs"))
	}
	if err != nil {
		t.Fatalf("the sandbox's processes: %v", err)
	}
	var ticks int64
	for _, pid := range strings.Fields(string(procs)) {
		b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
		if err != nil {
			continue // gone
		}
		// The fields after the command's name, which is in parentheses: utime and stime are
		// the 12th and 13th of them.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		for _, v := range f[11:13] {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("/proc/%s/stat: %v", pid, err)
			}
			ticks += n
		}
	}
	return time.Duration(ticks) * (time.Second / 100) // USER_HZ
}

// childCPU sums the children's user and system time from the shell's `times` output.
func childCPU(t *testing.T, out string) float64 {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var total float64
	for _, f := range strings.Fields(lines[len(lines)-1]) {
		m, s, ok := strings.Cut(strings.TrimSuffix(f, "s"), "m")
		mins, err1 := strconv.ParseFloat(m, 64)
		secs, err2 := strconv.ParseFloat(s, 64)
		if !ok || err1 != nil || err2 != nil {
			t.Fatalf("cannot read `times` output %q", out)
		}
		total += mins*60 + secs
	}
	return total
}

func TestFailedStartLeavesNothing(t *testing.T) {
	forEachTier(t, func(t *testing.T, h *harness) {
		if h.onCluster {
			t.Skip("a cluster sandbox's agent is its image's, not runner.Config.Agent: TestClusterFailedStartLeavesNothing fails a start there")
		}
		cfg := h.cfg
		cfg.Agent = staticFalse(t) // starts, then exits before serving: fails half-way
		r := runner.New(cfg, testenv.Logger(t))
		_, err := r.Run(context.Background(), h.spec("true"), runner.Stdio{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}, false)
		if err == nil {
			t.Fatal("a sandbox whose agent never serves reported success")
		}
		if !errors.Is(err, errdefs.ErrUnavailable) {
			t.Logf("error: %v", err)
		}
	})
}

// staticFalse builds a statically linked program that exits 1: an agent every tier starts
// (a microVM's guest runs only a static /init) and that fails before serving.
func staticFalse(t *testing.T) string {
	t.Helper()
	// Not t.TempDir: its parent is 0700, and the sandbox user runs the agent in some tiers.
	dir, err := os.MkdirTemp("", "pdk-false")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, out := filepath.Join(dir, "main.go"), filepath.Join(dir, "false")
	if err := os.WriteFile(src, []byte("package main\n\nimport \"os\"\n\nfunc main() { os.Exit(1) }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", out, src)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, msg)
	}
	return out
}
