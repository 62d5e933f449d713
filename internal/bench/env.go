package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/runner"
	"github.com/paddockhq/paddock/internal/sandbox/container"
)

// benchUser owns the sandboxes the harness creates through the runner.
const benchUser = "bench"

// Env is what the benchmarks run against: the binaries under test, a runner configured
// under a private temporary directory, and the same runc binary for the baselines.
type Env struct {
	// Paddock and Agent are the binaries built from this checkout; Runc is the runtime
	// both paddock and the baselines use.
	Paddock, Agent, Runc string
	// Config is the runner's configuration (data and state under Dir); Runner uses it.
	Config runner.Config
	Runner *runner.Runner
	// Dir holds everything the harness makes; Close removes it.
	Dir string

	runcRoot  string // --root of the baseline containers
	workspace string // /workspace of the baseline containers
	log       *slog.Logger
	proxy     *proxyFixture // the proxy benchmarks' control plane, once started
}

// NewEnv prepares an environment for the binaries paddock and paddock-agent in binDir.
// Sandboxes need root.
func NewEnv(binDir string, log *slog.Logger) (*Env, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("benchmarks create sandboxes and need root")
	}
	binDir, err := filepath.Abs(binDir)
	if err != nil {
		return nil, err
	}
	e := &Env{Paddock: filepath.Join(binDir, "paddock"), Agent: filepath.Join(binDir, "paddock-agent"), log: log}
	for _, p := range []string{e.Paddock, e.Agent} {
		if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
			return nil, fmt.Errorf("%s is missing: build it first (make build; make bench does)", p)
		}
	}
	if e.Runc, err = findRunc(); err != nil {
		return nil, err
	}
	// Short (Unix socket paths are capped at 108 bytes) and traversable by the sandbox user.
	if e.Dir, err = os.MkdirTemp("", "pdkb"); err != nil {
		return nil, err
	}
	if err := e.setup(log); err != nil {
		os.RemoveAll(e.Dir)
		return nil, err
	}
	return e, nil
}

func (e *Env) setup(log *slog.Logger) error {
	if err := os.Chmod(e.Dir, 0o711); err != nil {
		return err
	}
	cfg := runner.DefaultConfig()
	cfg.DataDir = filepath.Join(e.Dir, "data")
	cfg.StateDir = filepath.Join(e.Dir, "state")
	cfg.Agent, cfg.Runc = e.Agent, e.Runc
	cfg.DiskReserve = benchDiskReserve
	cfg, err := runner.LoadConfigFrom(cfg)
	if err != nil {
		return err
	}
	e.Config, e.Runner = cfg, runner.New(cfg, log)
	e.runcRoot = filepath.Join(e.Dir, "runc")
	e.workspace = filepath.Join(e.Dir, "workspace")
	if err := os.Mkdir(e.workspace, 0o700); err != nil {
		return err
	}
	return os.Chown(e.workspace, int(cfg.SandboxUID), int(cfg.SandboxGID))
}

// Close stops the control plane the proxy benchmarks started, if any, and removes what the
// environment made.
func (e *Env) Close() error {
	if e.proxy != nil {
		e.proxy.Close()
		e.proxy = nil
	}
	return errors.Join(runner.UnmountAll(e.Dir), os.RemoveAll(e.Dir))
}

// findRunc is the runc paddock itself would pick: its own install, then PATH.
func findRunc() (string, error) {
	p := filepath.Join(runner.InstallPrefix, "bin", "runc")
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	p, err := exec.LookPath("runc")
	if err != nil {
		return "", errors.New("runc is not installed (make setup installs it)")
	}
	return p, nil
}

// bundleConfig is the container configuration the CLI's runner would give a sandbox with
// its default configuration, for the baseline's bundle.
func (e *Env) bundleConfig(id, dir string) container.Config {
	d := runner.DefaultConfig()
	return container.Config{
		ID: id, Dir: dir, Workspace: e.workspace, Agent: e.Agent, UID: d.SandboxUID, GID: d.SandboxGID,
		// As runner.containerEnv: the environment does not change what is timed.
		Env:    []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp", "USER=sandbox", "LANG=C.UTF-8", "TMPDIR=/tmp"},
		Limits: d.Limits,
		UserNS: d.UserNS(),
	}
}

// command is an exec.Cmd with the harness's environment minus what would change paddock's
// behaviour (its debug logging).
func command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PADDOCK_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	return cmd
}

func newID(prefix string) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[b[i]%32]
	}
	return prefix + string(b)
}

// Machine is what the figures depend on besides the code.
type Machine struct {
	CPU, Cores, Memory, Kernel, Cgroups, Runc, Go, Paddock string
}

// DescribeMachine gathers the facts of this host for the report.
func (e *Env) DescribeMachine() Machine {
	m := Machine{
		CPU:     procField("/proc/cpuinfo", "model name"),
		Cores:   fmt.Sprint(runtime.NumCPU()),
		Memory:  procField("/proc/meminfo", "MemTotal"),
		Kernel:  strings.TrimSpace(readFile("/proc/sys/kernel/osrelease")),
		Cgroups: cgroups.DetectMode().String(),
		Go:      runtime.Version(),
	}
	if cgroups.DetectMode() == cgroups.V1 {
		if _, err := os.Stat("/sys/fs/cgroup/unified"); err == nil {
			m.Cgroups += " (hybrid)"
		}
	}
	if out, err := exec.Command(e.Runc, "--version").Output(); err == nil {
		m.Runc = firstLine(out) + " (" + e.Runc + ")"
	}
	if out, err := exec.Command(e.Paddock, "version").Output(); err == nil {
		m.Paddock = firstLine(out)
	}
	return m
}

func firstLine(b []byte) string {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	return strings.TrimSpace(string(line))
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// procField is the value of the first "key: value" line of a /proc file with key.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	return scanField(f, key)
}

func scanField(r io.Reader, key string) string {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
