package microvm_test

// The microVM tier boots a guest per sandbox, which under TCG (here) takes about ten
// seconds; these tests therefore check as much as they can per boot instead of running the
// whole conformance suite on this tier.

import (
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/microvm"
	"github.com/paddockhq/paddock/internal/testenv"
	"github.com/paddockhq/paddock/internal/wire"
)

func requireMicroVM(t *testing.T) microvm.Install {
	t.Helper()
	testenv.RequireRoot(t)
	in, err := microvm.Locate(filepath.Join(runner.InstallPrefix, "guest"))
	if err != nil {
		// Not a kernel limitation: scripts/setup.sh (run by make test) installs both, so a
		// missing QEMU or guest kernel is a broken setup, and must not pass as a skip.
		t.Fatalf("microvm tier not installed: %v", err)
	}
	return in
}

func TestLocateSaysWhatToInstall(t *testing.T) {
	_, err := microvm.Locate(t.TempDir())
	if err == nil {
		t.Fatal("Locate accepted a guest directory with no kernel")
	}
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "scripts/setup.sh") {
		t.Fatalf("Locate(empty dir) = %v, want ErrUnavailable naming scripts/setup.sh", err)
	}
}

// TestRunEndToEnd boots one guest through the runner and checks, in one command: the guest
// kernel, output and stderr apart, stdin, the user, the workspace both ways, the guest's
// memory, vCPUs, pids limit and /tmp size from the limits, the exit code, and that nothing is left behind.
func TestRunEndToEnd(t *testing.T) {
	in := requireMicroVM(t)
	cfg := testenv.Config(t)
	r := runner.New(cfg, testenv.Logger(t))
	ws := workspace(t)
	if err := os.WriteFile(filepath.Join(ws, "in.txt"), []byte("from host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `uname -r; cat; echo to-stderr >&2; id -u; pwd; cat in.txt; echo made > out.txt
		awk '/MemTotal/ {print ($2 < 262144) ? "mem-ok" : "mem-too-big"}' /proc/meminfo; nproc
		cat /sys/fs/cgroup/sandbox/pids.max; df -k /tmp | awk 'NR == 2 {print $2}'
		grep -q 127.0.0.1 /proc/net/fib_trie && echo lo-up; exit 3`
	spec := runner.Spec{
		User: "vm", Tier: wire.TierMicroVM, Workspace: ws, Main: []string{"sh", "-c", script},
		Limits: wire.Limits{Timeout: 2 * time.Minute, Memory: 256 << 20, CPUs: 1.5, Pids: 40, Tmp: 16 << 20},
	}
	var out, errb bytes.Buffer
	start := time.Now()
	res, err := r.Run(context.Background(), spec, runner.Stdio{Stdin: strings.NewReader("from stdin\n"), Stdout: &out, Stderr: &errb}, false)
	if err != nil {
		t.Fatalf("run: %v (stderr %q)", err, errb.String())
	}
	t.Logf("boot, run and teardown under %s: %s", accel(), time.Since(start))
	want := in.Version + "\nfrom stdin\n1000\n/workspace\nfrom host\nmem-ok\n2\n" + strconv.Itoa(40+wire.ThreadReserve+8) + "\n16384\nlo-up\n"
	if out.String() != want || errb.String() != "to-stderr\n" || res.ExitCode() != 3 {
		t.Fatalf("stdout %q stderr %q exit %d; want %q %q 3", out.String(), errb.String(), res.ExitCode(), want, "to-stderr\n")
	}
	if got, err := os.ReadFile(filepath.Join(ws, "out.txt")); err != nil || string(got) != "made\n" {
		t.Fatalf("file written in the guest: %q, %v", got, err)
	}
	assertNothingLeft(t, cfg)
}

// workspace is a directory the sandbox user (QEMU runs as that user) owns and can reach.
func workspace(t *testing.T) string {
	t.Helper()
	ws, err := os.MkdirTemp("", "pdk-ws")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(ws) })
	if err := os.Chown(ws, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	return ws
}

func accel() string { return "TCG" }

// TestHungGuestIsKilled gives a guest less time to boot than it needs: Start must fail
// with a clear error and leave no QEMU, cgroup or directory behind.
func TestHungGuestIsKilled(t *testing.T) {
	in := requireMicroVM(t)
	cfg := testenv.Config(t)
	dir := filepath.Join(cfg.StateDir, "sandboxes", "sb-hung")
	if err := os.MkdirAll(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	ws := workspace(t)
	start := time.Now()
	_, err := microvm.Start(context.Background(), microvm.Config{
		ID: "sb-hung", Dir: dir, Workspace: ws, Agent: cfg.Agent, UID: 1000, GID: 1000,
		Install: in, BootTimeout: 500 * time.Millisecond,
	})
	if err == nil || !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "did not answer within") {
		t.Fatalf("Start with a 500ms boot deadline = %v, want a boot timeout", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("a boot timeout of 500ms took %s to report", d)
	}
	assertNothingLeft(t, cfg)
}

func TestTooLittleMemory(t *testing.T) {
	requireMicroVM(t)
	r := testenv.Runner(t)
	spec := runner.Spec{User: "vm", Tier: wire.TierMicroVM, Main: []string{"true"}, Limits: wire.Limits{Memory: 64 << 20}}
	_, err := r.Run(context.Background(), spec, runner.Stdio{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}, false)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "MiB a microVM guest needs") {
		t.Fatalf("run with 64MiB = %v, want ErrInvalidArgument about the guest's minimum", err)
	}
}

// A dynamically linked agent (a plain `go build` with cgo on) cannot be the guest's /init:
// the start fails before any guest boots, saying what is wrong and how to fix it.
func TestDynamicAgentIsRefused(t *testing.T) {
	requireMicroVM(t)
	cfg := testenv.Config(t)
	cfg.Agent = dynamicBinary(t)
	r := runner.New(cfg, testenv.Logger(t))
	spec := runner.Spec{User: "vm", Tier: wire.TierMicroVM, Main: []string{"true"}}
	_, err := r.Run(context.Background(), spec, runner.Stdio{Stdout: &bytes.Buffer{}, Stderr: &bytes.Buffer{}}, false)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "dynamically linked") || !strings.Contains(err.Error(), "make build") {
		t.Fatalf("run with a dynamically linked agent = %v, want ErrFailedPrecondition saying so and to run make build", err)
	}
	assertNothingLeft(t, cfg)
	// A runner whose default tier is microvm says so in its health check.
	cfg.Tier = wire.TierMicroVM
	if err := runner.New(cfg, testenv.Logger(t)).Check(); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "dynamically linked") {
		t.Fatalf("Check of a microvm runner with a dynamically linked agent = %v, want ErrFailedPrecondition", err)
	}
	if err := microvm.CheckAgent(testenv.Binary(t, "paddock-agent")); err != nil {
		t.Fatalf("the agent make build makes: %v", err)
	}
}

// dynamicBinary builds, with cgo on, a program that resolves the current user through
// libc, as a plain `go build` of the agent does on a host with a C compiler.
func dynamicBinary(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("no C compiler (cc): cgo cannot build a dynamically linked binary here")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	code := "package main\n\nimport (\n\t\"fmt\"\n\t\"os/user\"\n)\n\nfunc main() { fmt.Println(user.Current()) }\n"
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "dynamic")
	cmd := exec.Command("go", "build", "-o", out, src)
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "CGO_ENABLED=1", "GOFLAGS=")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build with cgo: %v\n%s", err, msg)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if libs, _ := f.ImportedLibraries(); len(libs) == 0 {
		t.Fatalf("%s imports no library: not the dynamically linked binary this test needs", out)
	}
	return out
}

func assertNothingLeft(t *testing.T, cfg runner.Config) {
	t.Helper()
	entries, _ := os.ReadDir(filepath.Join(cfg.StateDir, "sandboxes"))
	for _, e := range entries {
		t.Errorf("sandbox state left behind: %s", e.Name())
		if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory/paddock", e.Name())); err == nil {
			t.Errorf("cgroup left behind: %s", e.Name())
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(cfg.StateDir)) && bytes.HasPrefix(b, []byte("/usr/bin/qemu")) {
			t.Errorf("qemu left running: %s", strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
}

// DetectAccel never trusts /dev/kvm's existence: it decides from a trial guest (or from
// why none could run), says why, answers from its cache for the rest of the boot, and
// believes no cache from another boot.
func TestDetectAccel(t *testing.T) {
	in := requireMicroVM(t)
	cfg := testenv.Config(t)
	dir := cfg.StateDir // where the runner keeps it: traversable by QEMU's unprivileged user
	if err := os.MkdirAll(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	// A cache from another boot of the host: not believed.
	stale := `{"key":"another-boot|` + in.QEMU + `|` + in.Kernel + `","accel":"kvm","reason":"stale"}`
	if err := os.WriteFile(filepath.Join(dir, "microvm-accel.json"), []byte(stale), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p := microvm.DetectAccel(context.Background(), in, cfg.Agent, dir, 1000, 1000)
	took := time.Since(start)
	t.Logf("accel %s after %s: %s", p.Accel, took.Round(time.Millisecond), p.Reason)
	if p.Accel != microvm.AccelKVM && p.Accel != microvm.AccelTCG || p.Cached || p.Reason == "stale" {
		t.Fatalf("probe %+v: want kvm or tcg decided now, not the stale cache", p)
	}
	if !strings.Contains(strings.ToLower(p.Reason), "kvm") {
		t.Errorf("the reason does not say what about KVM decided: %q", p.Reason)
	}
	if took > microvm.KVMProbeTimeout+10*time.Second {
		t.Errorf("the probe took %s, over its %s bound", took, microvm.KVMProbeTimeout)
	}
	again := microvm.DetectAccel(context.Background(), in, cfg.Agent, dir, 1000, 1000)
	if !again.Cached || again.Accel != p.Accel || again.Reason != p.Reason {
		t.Fatalf("second probe %+v, want the first's answer from the cache", again)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "kvm-probe-*")); len(left) > 0 {
		t.Errorf("the trial guest left %v", left)
	}
	// Its own cgroup only: other tests' trial guests may be running meanwhile.
	if p.Trial != "" {
		if cg, _ := filepath.Glob("/sys/fs/cgroup/*/paddock/" + p.Trial); len(cg) > 0 {
			t.Errorf("the trial guest left cgroups %v", cg)
		}
	} else if p.Accel == microvm.AccelKVM || strings.Contains(p.Reason, "trial guest") {
		t.Errorf("a trial guest ran (%q) but the probe does not name it", p.Reason)
	}
}
