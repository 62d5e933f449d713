// Package container runs a sandbox as an OCI container: a bundle built from runtime-spec
// types, run by an OCI runtime binary (runc; runsc for gVisor).
//
// Threat model: everything inside the container is hostile. The container gets its own pid,
// mount, network (loopback only), ipc, uts and cgroup namespaces; a read-only root made of
// the host's /usr and a curated /etc; a non-root user with no capabilities and
// no_new_privs; Docker's default seccomp allowlist less ptrace and io_uring; cgroup limits.
// The agent's channel is a listening Unix socket created on the host and inherited by the
// agent as a file descriptor: its path exists only on the host, so nothing in the sandbox
// but the agent can reach it, and the host knows which sandbox speaks by which socket it
// dialled.
package container

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"google.golang.org/grpc"

	"github.com/paddockhq/paddock/internal/cgroups"
	"github.com/paddockhq/paddock/internal/errdefs"
	"github.com/paddockhq/paddock/internal/sandbox"
	"github.com/paddockhq/paddock/internal/wire"
)

// Limits are a container's resource limits; zero means unlimited (or the default).
type Limits struct {
	MemoryBytes int64
	CPUs        float64
	Pids        int64
	// TmpBytes sizes the /tmp tmpfs (default 1 GiB; its pages count against MemoryBytes).
	TmpBytes int64
}

func (l Limits) tmpSize() int64 {
	if l.TmpBytes > 0 {
		return l.TmpBytes
	}
	return 1 << 30
}

// Runtime drives an OCI runtime binary.
type Runtime struct {
	// Name is "runc" or "runsc".
	Name string
	// Binary is the runtime's executable.
	Binary string
	// StateDir is the runtime's --root: its own bookkeeping of containers.
	StateDir string
	Log      *slog.Logger
}

// Config describes one container sandbox.
type Config struct {
	ID string
	// Dir is the sandbox's own host directory: bundle, socket, logs. Destroy removes it.
	Dir       string
	Workspace string // host directory bound at /workspace
	Agent     string // host path of the paddock-agent binary
	UID, GID  uint32
	Env       []string
	Main      *wire.Command
	Limits    Limits
}

// Sandbox is a running container.
type Sandbox struct {
	ID     string
	rt     *Runtime
	dir    string
	cgroup string
	conn   *grpc.ClientConn
}

// Start creates and starts the container, and returns once the agent's process runs. The
// agent may still be starting: the first RPC on Conn waits for it.
func (rt *Runtime) Start(ctx context.Context, cfg Config) (*Sandbox, error) {
	sb := &Sandbox{ID: cfg.ID, rt: rt, dir: cfg.Dir, cgroup: "/paddock/" + cfg.ID}
	if err := sb.start(ctx, cfg); err != nil {
		_ = sb.Destroy(context.WithoutCancel(ctx))
		return nil, err
	}
	return sb, nil
}

func (sb *Sandbox) start(ctx context.Context, cfg Config) error {
	rt := sb.rt
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "bundle"), 0o700); err != nil {
		return fmt.Errorf("sandbox dir: %w", err)
	}
	if err := rt.writeBundle(cfg, sb.cgroup); err != nil {
		return fmt.Errorf("bundle: %w", err)
	}
	sock := filepath.Join(cfg.Dir, "agent.sock")
	lis, err := sandbox.Listen(sock)
	if err != nil {
		return err
	}
	defer lis.Close()
	env := &wire.Envelope{Version: wire.EnvelopeVersion, SandboxID: cfg.ID, Tier: wire.TierContainer, Workspace: WorkspacePath, ListenFD: sandbox.AgentListenFD, Env: cfg.Env, Main: cfg.Main}
	if err := rt.run(ctx, cfg, lis, env); err != nil {
		return err
	}
	sb.conn, err = sandbox.Dial(sock)
	return err
}

func (rt *Runtime) writeBundle(cfg Config, cgroup string) error {
	return WriteBundle(cfg, filepath.Join(cfg.Dir, "bundle"), cgroup, nil)
}

// WriteBundle writes the OCI bundle paddock runs for cfg into dir, with args as the
// container's process instead of the agent when set. Benchmarks use it to run exactly
// paddock's container under a bare runtime.
func WriteBundle(cfg Config, dir, cgroup string, args []string) error {
	b := bundleSpec{
		id: cfg.ID, hostname: "sandbox", uid: cfg.UID, gid: cfg.GID, workspace: cfg.Workspace,
		agent: cfg.Agent, env: cfg.Env, limits: cfg.Limits, cgroup: cgroup, swap: swapAccounted(),
	}
	if err := makeRootfs(filepath.Join(dir, "rootfs"), b); err != nil {
		return fmt.Errorf("rootfs: %w", err)
	}
	spec, err := buildSpec(b)
	if err != nil {
		return err
	}
	if args != nil {
		spec.Process.Args = args
	}
	return writeJSON(filepath.Join(dir, "config.json"), spec)
}

// run starts the container detached: runc passes its stdio through to the agent, so the
// envelope goes in on stdin and the agent's log comes out in agent.log.
func (rt *Runtime) run(ctx context.Context, cfg Config, lis *os.File, env *wire.Envelope) error {
	stdin, release, err := sandbox.EnvelopePipe(env)
	if err != nil {
		return err
	}
	defer stdin.Close()
	release()
	logf, err := os.OpenFile(filepath.Join(cfg.Dir, "agent.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, rt.Binary, "--root", rt.StateDir, "run", "--detach", "--preserve-fds", "1", "--bundle", filepath.Join(cfg.Dir, "bundle"), cfg.ID)
	cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = stdin, logf, logf, []*os.File{lis}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s run: %s: %w", rt.Name, sandbox.LastLogError(filepath.Join(cfg.Dir, "agent.log")), errdefs.ErrUnavailable)
	}
	return nil
}

// Conn is the channel to the sandbox's agent.
func (sb *Sandbox) Conn() *grpc.ClientConn { return sb.conn }

// OOMKills reads how many processes the memory limit killed. Read it before Destroy.
func (sb *Sandbox) OOMKills() (uint64, error) {
	g, err := cgroups.Load(sb.cgroup)
	if err != nil {
		return 0, err
	}
	return g.OOMKills()
}

// Cgroup is the sandbox's cgroup path.
func (sb *Sandbox) Cgroup() string { return sb.cgroup }

// LastError is the last error the agent or the runtime logged, for error messages.
func (sb *Sandbox) LastError() string {
	return sandbox.LastLogError(filepath.Join(sb.dir, "agent.log"))
}

// Destroy kills every process of the sandbox and removes the container, its cgroup and its
// directory. It is idempotent.
func (sb *Sandbox) Destroy(ctx context.Context) error {
	if sb.conn != nil {
		sb.conn.Close()
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var errs []error
	out, err := exec.CommandContext(ctx, sb.rt.Binary, "--root", sb.rt.StateDir, "delete", "--force", sb.ID).CombinedOutput()
	if err != nil && !bytes.Contains(out, []byte("does not exist")) && !bytes.Contains(out, []byte("not exist")) {
		errs = append(errs, fmt.Errorf("%s delete %s: %s", sb.rt.Name, sb.ID, bytes.TrimSpace(out)))
	}
	if g, err := cgroups.Load(sb.cgroup); err == nil {
		errs = append(errs, g.Kill(ctx), g.Delete())
	}
	errs = append(errs, os.RemoveAll(sb.dir))
	return errors.Join(errs...)
}
