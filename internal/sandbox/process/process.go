// Package process is the explicitly insecure tier: the sandbox is a host process.
//
// There are no namespaces: the agent and the command share the host's pid, network and
// mount views. What confines them is what the agent applies to itself before it starts
// anything (Landlock: the workspace and a private tmp read-write, system directories
// read-only; a seccomp deny list; rlimits; no_new_privs, see internal/harden), an
// unprivileged user, and a cgroup with the sandbox's limits that the agent is put into
// before it reads its bootstrap envelope. It exists for hosts where no container runtime
// works, and is only ever chosen with an explicit --insecure.
package process

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/sandbox"
	"github.com/paddockhq/paddock/internal/spawn"
	"github.com/paddockhq/paddock/internal/wire"
)

// Config describes one process-tier sandbox.
type Config struct {
	ID string
	// Dir is the sandbox's own host directory (socket, log, private tmp); Destroy removes it.
	Dir       string
	Workspace string
	Agent     string
	UID, GID  uint32
	// Env is added to the sandbox's default environment.
	Env    []string
	Main   *wire.Command
	Limits cgroups.Limits
	// CapabilityKeys is the agent's capability keyring (wire.Envelope.CapabilityKeys).
	CapabilityKeys string
	// FileSizeLimit is RLIMIT_FSIZE for the sandbox's commands (wire.Envelope.FileSizeLimit).
	FileSizeLimit int64
}

// readOnly are the host paths a process-tier sandbox may read and execute.
var readOnly = []string{
	"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
	"/etc/alternatives", "/etc/ssl/certs", "/etc/ld.so.cache", "/etc/localtime", "/etc/passwd", "/etc/group",
	"/etc/hosts", "/etc/nsswitch.conf", "/etc/resolv.conf", "/etc/os-release", "/etc/mime.types", "/etc/protocols", "/etc/services",
}

// Sandbox is a running process-tier sandbox.
type Sandbox struct {
	ID    string
	dir   string
	group *cgroups.Group
	cmd   *exec.Cmd
	// Agent's AgentExited is closed once the agent's process has been waited for.
	sandbox.Agent
}

// Start starts the agent as an unprivileged host process in the sandbox's cgroup.
func Start(ctx context.Context, cfg Config, log *slog.Logger) (*Sandbox, error) {
	sb := &Sandbox{ID: cfg.ID, dir: cfg.Dir}
	if err := sb.start(cfg); err != nil {
		_ = sb.Destroy(context.WithoutCancel(ctx))
		return nil, err
	}
	return sb, nil
}

func (sb *Sandbox) start(cfg Config) (err error) {
	tmp := filepath.Join(cfg.Dir, "tmp")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return fmt.Errorf("sandbox dir: %w", err)
	}
	if err := os.Chown(tmp, int(cfg.UID), int(cfg.GID)); err != nil {
		return fmt.Errorf("sandbox tmp: %w", err)
	}
	if sb.group, err = cgroups.Create("/paddock/"+cfg.ID, cfg.Limits); err != nil {
		return err
	}
	sock := filepath.Join(cfg.Dir, "agent.sock")
	lis, err := sandbox.Listen(sock)
	if err != nil {
		return err
	}
	defer lis.Close()
	env := envelope(cfg, tmp)
	stdin, release, err := sandbox.EnvelopePipe(env)
	if err != nil {
		return err
	}
	defer stdin.Close()
	if err := sb.startAgent(cfg, stdin, lis); err != nil {
		return err
	}
	// The agent waits on its stdin: it runs nothing before it is in the cgroup.
	if err := sb.group.Add(sb.cmd.Process.Pid); err != nil {
		return err
	}
	release()
	sb.AgentConn, err = sandbox.Dial(sock)
	return err
}

func envelope(cfg Config, tmp string) *wire.Envelope {
	env := append([]string{
		"PATH=" + sandbox.DefaultPath,
		"HOME=" + tmp, "TMPDIR=" + tmp, "USER=sandbox", "LOGNAME=sandbox", "LANG=C.UTF-8",
	}, cfg.Env...)
	var ro []string
	for _, p := range readOnly {
		if _, err := os.Stat(p); err == nil {
			ro = append(ro, p)
		}
	}
	return &wire.Envelope{
		Version: wire.EnvelopeVersion, SandboxID: cfg.ID, Tier: wire.TierProcess, Workspace: cfg.Workspace,
		ListenFD: sandbox.AgentListenFD, Env: env, Main: cfg.Main,
		Process:        &wire.ProcessConfinement{TempDir: tmp, ReadOnly: ro, MaxOpenFiles: 4096},
		CapabilityKeys: cfg.CapabilityKeys, FileSizeLimit: cfg.FileSizeLimit,
	}
}

func (sb *Sandbox) startAgent(cfg Config, stdin, lis *os.File) error {
	logf, err := os.OpenFile(filepath.Join(cfg.Dir, "agent.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(cfg.Agent)
	// Nothing of paddock's environment goes in: the agent gets its environment from the
	// envelope.
	cmd.Env = []string{}
	cmd.Dir = cfg.Workspace
	cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = stdin, logf, logf, []*os.File{lis}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid:     true,
		Pdeathsig:  syscall.SIGKILL,
		Credential: &syscall.Credential{Uid: cfg.UID, Gid: cfg.GID, Groups: []uint32{}},
	}
	if err := spawn.Start(cmd); err != nil { // its Pdeathsig then follows this process
		return fmt.Errorf("start agent: %w", err)
	}
	sb.cmd = cmd
	sb.AgentExited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(sb.AgentExited)
	}()
	return nil
}

// OOMKills reads how many processes the memory limit killed.
func (sb *Sandbox) OOMKills() (uint64, error) {
	if sb.group == nil {
		return 0, nil
	}
	return sb.group.OOMKills()
}

// LastError is the last error the agent logged, for error messages.
func (sb *Sandbox) LastError() string {
	return sandbox.LastLogError(filepath.Join(sb.dir, "agent.log"))
}

// Cgroup is the sandbox's cgroup path.
func (sb *Sandbox) Cgroup() string { return "/paddock/" + sb.ID }

// Destroy kills every process in the sandbox's cgroup and removes the cgroup and the
// sandbox's directory. It is idempotent.
func (sb *Sandbox) Destroy(ctx context.Context) error {
	_ = sb.CloseConn()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var errs []error
	if sb.group != nil {
		errs = append(errs, sb.group.Kill(ctx), sb.group.Delete())
	}
	if sb.cmd != nil {
		_ = sb.cmd.Process.Kill()
		select {
		case <-sb.AgentExited:
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("the agent (pid %d) did not exit after SIGKILL", sb.cmd.Process.Pid))
		}
		sb.cmd = nil
	}
	errs = append(errs, os.RemoveAll(sb.dir))
	return errors.Join(errs...)
}
