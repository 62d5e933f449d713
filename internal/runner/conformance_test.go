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
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/testenv"
	"github.com/paddockhq/paddock/internal/wire"
)

// tiers lists the tiers (and the container tier's runtimes) under test with what differs
// between them.
var tiers = []struct {
	name     string
	tier     wire.Tier
	runtime  string // OCI runtime of the container tier
	insecure bool
	// inContainer is set when the workspace appears at /workspace.
	inContainer bool
}{
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
}

func forEachTier(t *testing.T, f func(t *testing.T, h *harness)) {
	testenv.RequireRoot(t)
	for _, tc := range tiers {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testenv.Config(t)
			h := &harness{t: t, cfg: cfg, r: runner.New(cfg, testenv.Logger(t)), tier: tc.tier, runtime: tc.runtime, insecure: tc.insecure, inCtr: tc.inContainer}
			f(t, h)
			h.assertNothingLeft()
		})
	}
}

func (h *harness) spec(argv ...string) runner.Spec {
	return runner.Spec{User: "conf", Tier: h.tier, Runtime: h.runtime, Insecure: h.insecure, Main: argv, Limits: runner.Limits{Timeout: time.Minute}}
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
			start := time.Now()
			o := h.run(spec, "")
			if !o.res.TimedOut || o.res.ExitCode() != 124 || time.Since(start) > 10*time.Second {
				t.Fatalf("timed out %v exit %d after %v", o.res.TimedOut, o.res.ExitCode(), time.Since(start))
			}
		})
		t.Run("memory", func(t *testing.T) {
			spec := h.spec("sh", "-c", `x=$(head -c 200000000 /dev/zero | tr '\0' a); echo survived`)
			spec.Limits.Memory = 64 << 20
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
		cfg := h.cfg
		cfg.Agent = "/bin/false" // starts, then exits before serving: fails half-way
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
